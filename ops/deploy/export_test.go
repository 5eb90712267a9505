package deploy

import "github.com/overdeck/mcp-backend/ops/outcome"

// CodeOf is the exit code of err, for the tests that check one.
var CodeOf = outcome.CodeOf
