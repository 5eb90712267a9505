// Package ansible holds the Ansible collection overdeck.mcp
// (ansible_collections/overdeck/mcp/): a module that runs one mcpctl
// command with --json on a host and reads its JSON and exit code, a role
// with install, canary, stress, cutover, rollback and status entry points,
// and the install, rolling_update and revert playbooks. Its test runs the
// playbooks with ansible-playbook against three real systemd containers
// reached over SSH, as the fleet's test does.
package ansible
