// Package archdoc keeps ARCHITECTURE.md true to the code: its test fails
// when a package of the module is missing from the code layout table or
// when the generated list of imports differs from what the packages import
// (go test ./internal/archdoc -update rewrites that list). It holds no code
// of its own.
package archdoc
