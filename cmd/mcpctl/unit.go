package main

import (
	"errors"

	"github.com/urfave/cli/v2"
)

func unitCommand(d *deps) *cli.Command {
	return &cli.Command{
		Name:  "unit",
		Usage: "render or install the systemd units",
		Action: func(*cli.Context) error {
			return errors.New("unit: not implemented yet")
		},
	}
}
