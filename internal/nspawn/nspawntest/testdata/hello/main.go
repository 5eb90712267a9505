// Command hello prints its build version; BuildBinary's tests build it.
package main

import (
	"fmt"

	"github.com/overdeck/mcp-backend/internal/buildinfo"
)

func main() { fmt.Println(buildinfo.Version) }
