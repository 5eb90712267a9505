// Package e2e holds the end-to-end tests of mcp-backend itself: the real
// binary under a real systemd in a container (jobs as units and their
// containment, policy approvals with mcpctl, the audit trail in the real
// journal), and in e2e/clients the real-client conformance suite. They test
// the backend, not deploys, so they live here rather than in ops/deploy;
// the container harness they share with the deploy tests is
// internal/sitetest. The package has no code of its own.
package e2e
