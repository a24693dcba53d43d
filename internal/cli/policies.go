package cli

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/outboxd/outboxd/internal/envflag"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/endpoint/endpointschema"
	"github.com/outboxd/outboxd/providers/sendgrid"
	"github.com/outboxd/outboxd/providers/stripe"
	"github.com/outboxd/outboxd/providers/webhook"
)

// Policies are the settings that decide whether an effect may be fired
// again, and where: the providers' key windows, the per-kind in-doubt
// policies and the non-public networks webhooks may reach. outboxd run
// and outboxctl read them from the same flags and environment variables,
// so an operator's redrive or edit applies the rules the workers apply.
type Policies struct {
	InDoubt               map[string]string
	WebhookKeyWindow      time.Duration
	StripeKeyWindow       time.Duration
	StripeKeyWindowMargin time.Duration
	WebhookAllowCIDRs     []string
}

// Bind adds the policy flags to fs.
func (p *Policies) Bind(fs *pflag.FlagSet) {
	fs.StringToStringVar(&p.InDoubt, "in-doubt-policy", map[string]string{}, "per-kind policy after an attempt of unknown outcome, e.g. email.digest=at_least_once (at_least_once re-sends, at_most_once parks as failed)")
	envflag.Bind(fs, "in-doubt-policy", "OUTBOXD_IN_DOUBT_POLICY")
	fs.DurationVar(&p.WebhookKeyWindow, "webhook-key-window", webhook.DefaultKeyWindow, "how long receivers remember a webhook-id; no re-fire after it")
	envflag.Bind(fs, "webhook-key-window", "OUTBOXD_WEBHOOK_KEY_WINDOW")
	fs.DurationVar(&p.StripeKeyWindow, "stripe-key-window", stripe.DefaultKeyWindow, "how long Stripe remembers an idempotency key; no re-fire after it, minus the margin")
	envflag.Bind(fs, "stripe-key-window", "OUTBOXD_STRIPE_KEY_WINDOW")
	fs.DurationVar(&p.StripeKeyWindowMargin, "stripe-key-window-margin", stripe.DefaultKeyWindowMargin, "kept back from --stripe-key-window for clock skew and in-flight time")
	envflag.Bind(fs, "stripe-key-window-margin", "OUTBOXD_STRIPE_KEY_WINDOW_MARGIN")
	fs.StringSliceVar(&p.WebhookAllowCIDRs, "webhook-allow-cidrs", nil, "non-public networks webhooks and endpoints may reach, e.g. 10.0.0.0/8 (default: none)")
	envflag.Bind(fs, "webhook-allow-cidrs", "OUTBOXD_WEBHOOK_ALLOW_CIDRS")
}

// Validate checks ranges and relations, naming the setting at fault.
func (p *Policies) Validate() error {
	if p.WebhookKeyWindow <= webhook.KeyWindowMargin {
		return Usagef("--webhook-key-window (OUTBOXD_WEBHOOK_KEY_WINDOW) is %s: it must exceed its %s margin", p.WebhookKeyWindow, webhook.KeyWindowMargin)
	}
	if p.StripeKeyWindowMargin <= 0 {
		return Usagef("--stripe-key-window-margin (OUTBOXD_STRIPE_KEY_WINDOW_MARGIN) is %s: it must be positive", p.StripeKeyWindowMargin)
	}
	if p.StripeKeyWindow <= p.StripeKeyWindowMargin {
		return Usagef("--stripe-key-window (OUTBOXD_STRIPE_KEY_WINDOW) is %s: it must exceed --stripe-key-window-margin (%s)", p.StripeKeyWindow, p.StripeKeyWindowMargin)
	}
	_, err := p.InDoubtPolicies()
	return err
}

// InDoubtPolicies parses the per-kind in-doubt policies.
func (p *Policies) InDoubtPolicies() (map[string]providers.InDoubtPolicy, error) {
	out := make(map[string]providers.InDoubtPolicy, len(p.InDoubt))
	kinds := make([]string, 0, len(p.InDoubt))
	for kind := range p.InDoubt {
		kinds = append(kinds, kind)
	}
	sort.Strings(kinds)
	for _, kind := range kinds {
		pol := providers.InDoubtPolicy(p.InDoubt[kind])
		if pol != providers.AtLeastOnce && pol != providers.AtMostOnce {
			return nil, Usagef("--in-doubt-policy (OUTBOXD_IN_DOUBT_POLICY): %s=%q: use at_least_once or at_most_once", kind, p.InDoubt[kind])
		}
		out[kind] = pol
	}
	return out, nil
}

// WebhookConfig and StripeConfig carry the windows into providers' configs.
func (p *Policies) WebhookConfig(c webhook.Config) webhook.Config {
	c.KeyWindow = p.WebhookKeyWindow
	return c
}

// StripeConfig sets c's key window and margin.
func (p *Policies) StripeConfig(c stripe.Config) stripe.Config {
	c.KeyWindow, c.KeyWindowMargin = p.StripeKeyWindow, p.StripeKeyWindowMargin
	return c
}

// Guarantees are the guarantees of every built-in provider under these
// settings, by provider name.
func (p *Policies) Guarantees() map[string]providers.Guarantees {
	return map[string]providers.Guarantees{
		webhook.Name: p.WebhookConfig(webhook.Config{}).Guarantees(),
		// Endpoints are webhooks: receivers remember a webhook-id as long.
		endpointschema.Name: p.WebhookConfig(webhook.Config{}).Guarantees(),
		stripe.Name:         p.StripeConfig(stripe.Config{}).Guarantees(),
		sendgrid.Name:       sendgrid.Guarantees,
	}
}

// String describes the settings for logs.
func (p *Policies) String() string {
	return fmt.Sprintf("webhook key window %s, stripe key window %s (margin %s), in-doubt overrides %v",
		p.WebhookKeyWindow, p.StripeKeyWindow, p.StripeKeyWindowMargin, p.InDoubt)
}

// AllowedNetworks parses --webhook-allow-cidrs (OUTBOXD_WEBHOOK_ALLOW_CIDRS):
// the non-public networks webhooks and endpoints may reach, as outboxd run
// and outboxctl read them alike.
func AllowedNetworks(cidrs []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(cidrs))
	for _, s := range cidrs {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			return nil, Usagef("--webhook-allow-cidrs (OUTBOXD_WEBHOOK_ALLOW_CIDRS): %q is not a CIDR such as 10.0.0.0/8", s)
		}
		out = append(out, p.Masked())
	}
	if err := webhook.CheckAllowedNetworks(out); err != nil {
		return nil, Usagef("--webhook-allow-cidrs (OUTBOXD_WEBHOOK_ALLOW_CIDRS): %w", err)
	}
	return out, nil
}
