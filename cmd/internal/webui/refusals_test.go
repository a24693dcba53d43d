package webui_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/outboxtype"
)

// TestRefusalsSayWhatIsMissing: a click without a credential is told
// every way this view accepts one; a form whose reviewed field is damaged
// is told so, not that the effect changed, and nothing is done.
func TestRefusalsSayWhatIsMissing(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	id := s.ids["gone"].String()
	resp, err := http.Post(s.url("effects/"+id+"/actions/cancel"), "application/x-www-form-urlencoded", strings.NewReader("reason=x"))
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Contains(t, string(body), "your name as user and the admin token as password")
	require.Contains(t, string(body), "bearer token")

	tok := strings.Repeat("c", 64)
	post := func(form url.Values) (int, string) {
		form.Set("csrf", tok)
		req, err := http.NewRequest(http.MethodPost, s.url("effects/"+id+"/actions/cancel"), strings.NewReader(form.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.SetBasicAuth("ada", adminToken)
		req.AddCookie(&http.Cookie{Name: "outboxd_csrf", Value: tok})
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	for _, reviewed := range []string{"", "garbage", "0123456789abcdef"} {
		status, page := post(url.Values{"reason": {"retired"}, "reviewed": {reviewed}})
		require.Equal(t, http.StatusConflict, status, reviewed)
		require.Contains(t, page, "its reviewed field is missing or damaged", reviewed)
		require.NotContains(t, page, "changed since the page was opened", reviewed)
	}
	require.Equal(t, outboxtype.StateFailed, s.effect(t, "gone").State, "nothing done")
}
