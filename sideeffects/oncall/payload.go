package oncall

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// PayloadDiff lists what changes from payload a to payload b, one leaf a
// line, sorted ("params.reason: "oops" -> "requested_by_customer""), for
// an operator's edit (outboxctl edit, the web view's edit payload).
func PayloadDiff(a, b json.RawMessage) []string {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return nil
	}
	fa, fb := map[string]string{}, map[string]string{}
	flatten("", va, fa)
	flatten("", vb, fb)
	var out []string
	for k, x := range fa {
		if y, ok := fb[k]; !ok {
			out = append(out, k+": "+x+" -> (removed)")
		} else if x != y {
			out = append(out, k+": "+x+" -> "+y)
		}
	}
	for k, y := range fb {
		if _, ok := fa[k]; !ok {
			out = append(out, k+": (added) "+y)
		}
	}
	slices.Sort(out)
	return out
}

func flatten(path string, v any, out map[string]string) {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			flatten(strings.TrimPrefix(path+"."+k, "."), x, out)
		}
	case []any:
		for i, x := range t {
			flatten(fmt.Sprintf("%s[%d]", path, i), x, out)
		}
	default:
		b, _ := json.Marshal(t)
		out[cmpOr(path, "(payload)")] = string(b)
	}
}
