package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/overworld-p2p/overworld/node"
)

func versionCommand() command {
	return command{
		name:    "version",
		summary: "print the version of overworld and its main libraries",
		run: func(_ context.Context, args []string, out, _ io.Writer) error {
			fs := newFlagSet("version", "Print the version of overworld, Go and the libp2p libraries it was built with.", out)
			if err := parseFlags(fs, args); err != nil {
				return err
			}
			fmt.Fprintf(out, "overworld %s (%s %s/%s)\n", node.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			if info, ok := debug.ReadBuildInfo(); ok {
				for _, dep := range info.Deps {
					switch dep.Path {
					case "github.com/libp2p/go-libp2p", "github.com/libp2p/go-libp2p-kad-dht",
						"github.com/libp2p/go-libp2p-pubsub", "github.com/multiformats/go-multiaddr":
						fmt.Fprintf(out, "  %s %s\n", dep.Path, dep.Version)
					}
				}
			}
			return nil
		},
	}
}
