package flashserve

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/fileserver"
)

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "flash-serve",
		Usage: "[--domain <example.com>] [--root <path>] [--listen <addr>] [--browse] [--access-log] [--debug]",
		Short: "Serves a folder with flash_serve, without a config file",
		Long: `
Serves the files under --root (default: the current directory) with the
flash_serve handler. It is the flash_serve counterpart of 'caddy file-server':
it builds the whole JSON config itself, so no Caddyfile is needed.

--listen sets the socket address (default :80, or :443 with --domain).
With --domain, the server answers only for that host and uses HTTPS with a
certificate that Caddy obtains and renews.

--browse lists directories that have no index file.`,
		CobraFunc: func(cmd *cobra.Command) {
			cmd.Flags().StringP("domain", "d", "", "Domain name at which to serve the files")
			cmd.Flags().StringP("root", "r", "", "The path to the root of the site")
			cmd.Flags().StringP("listen", "l", "", "The address to which to bind the listener")
			cmd.Flags().BoolP("browse", "b", false, "Enable directory browsing")
			cmd.Flags().BoolP("access-log", "a", false, "Enable the access log")
			cmd.Flags().BoolP("debug", "v", false, "Enable verbose debug logs")
			cmd.RunE = caddycmd.WrapCommandFuncForCobra(cmdFlashServe)
			cmd.AddCommand(residencyCommand(), prewarmCommand())
		},
	})
}

// cmdFlashServe runs the flash-serve command.
func cmdFlashServe(fl caddycmd.Flags) (int, error) {
	caddy.TrapSignals()
	cfg, err := commandConfig(commandOptions{
		domain:    fl.String("domain"),
		root:      fl.String("root"),
		listen:    fl.String("listen"),
		browse:    fl.Bool("browse"),
		accessLog: fl.Bool("access-log"),
		debug:     fl.Bool("debug"),
	})
	if err != nil {
		return caddy.ExitCodeFailedStartup, err
	}
	if err := caddy.Run(cfg.Config); err != nil {
		return caddy.ExitCodeFailedStartup, err
	}
	caddy.Log().Info("flash_serve serving static files", zap.String("root", cfg.root), zap.String("listen", cfg.listen))
	select {}
}

type commandOptions struct {
	domain, root, listen     string
	browse, accessLog, debug bool
}

// commandRun is a caddy.Config with what the command prints about it.
type commandRun struct {
	*caddy.Config
	root, listen string
}

// commandConfig builds the JSON config that the command runs.
func commandConfig(o commandOptions) (commandRun, error) {
	handler := FlashServe{Root: o.root}
	if o.browse {
		handler.Browse = new(fileserver.Browse)
	}
	route := caddyhttp.Route{HandlersRaw: []json.RawMessage{
		caddyconfig.JSONModuleObject(handler, "handler", "flash_serve", nil),
	}}
	if o.domain != "" {
		route.MatcherSetsRaw = []caddy.ModuleMap{{
			"host": caddyconfig.JSON(caddyhttp.MatchHost{o.domain}, nil),
		}}
	}
	listen := o.listen
	if listen == "" {
		if o.domain == "" {
			listen = ":80"
		} else {
			listen = ":" + strconv.Itoa(certmagic.HTTPSPort)
		}
	}
	if _, err := caddy.ParseNetworkAddress(listen); err != nil {
		return commandRun{}, fmt.Errorf("--listen %q: %w", listen, err)
	}
	server := &caddyhttp.Server{
		Listen:            []string{listen},
		ReadHeaderTimeout: caddy.Duration(10 * time.Second),
		IdleTimeout:       caddy.Duration(30 * time.Second),
		MaxHeaderBytes:    10 << 10,
		Routes:            caddyhttp.RouteList{route},
		// Wrapped raw TCP connections send bodies with sendfile; TLS
		// connections pass through the wrapper untouched.
		ListenerWrappersRaw: []json.RawMessage{json.RawMessage(`{"wrapper":"flash_serve"}`)},
	}
	if o.accessLog {
		server.Logs = &caddyhttp.ServerLogConfig{}
	}
	httpApp := caddyhttp.App{Servers: map[string]*caddyhttp.Server{"flash_serve": server}}
	persist := false
	cfg := &caddy.Config{
		Admin: &caddy.AdminConfig{
			Disabled: true,
			Config:   &caddy.ConfigSettings{Persist: &persist},
		},
		AppsRaw: caddy.ModuleMap{"http": caddyconfig.JSON(httpApp, nil)},
	}
	if o.debug {
		cfg.Logging = &caddy.Logging{Logs: map[string]*caddy.CustomLog{
			"default": {BaseLog: caddy.BaseLog{Level: zap.DebugLevel.CapitalString()}},
		}}
	}
	root := o.root
	if root == "" {
		root = "."
	}
	return commandRun{Config: cfg, root: root, listen: listen}, nil
}
