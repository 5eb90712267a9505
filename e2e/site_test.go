package e2e

import (
	"testing"
	"time"

	"github.com/overdeck/mcp-backend/internal/sitetest"
)

// site is the sitetest harness's production deployment, with this
// package's own helpers as methods.
type site struct{ *sitetest.Site }

// newSite is sitetest.New: a site in a fresh container, its rollback
// deadline deadline.
func newSite(t testing.TB, deadline time.Duration) *site {
	t.Helper()
	return &site{sitetest.New(t, deadline)}
}
