// Package contrib holds what operators add around mcp-backend: Prometheus
// alerting rules (prometheus/) and a Grafana dashboard (grafana/) for the
// metrics /metrics exports. Its tests check them against the real /metrics
// text and with promtool.
package contrib
