package flashserve

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/encode"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/fileserver"
	caddytpl "github.com/caddyserver/caddy/v2/modules/caddyhttp/templates"
)

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "flash-serve",
		Usage: "[--domain <example.com>] [--root <path>] [--listen <addr>] [--browse] [--reveal-symlinks] [--templates] [--access-log] [--debug] [--file-limit <n>] [--no-compress] [--precompressed <formats>] [--version]",
		Short: "Serves a folder with flash_serve, without a config file",
		Long: `
Serves the files under --root (default: the current directory) with the
flash_serve handler. It is the flash_serve counterpart of 'caddy file-server',
flag for flag, and builds the whole JSON config itself (the flash_serve
listener wrapper included), so no Caddyfile is needed.

--listen sets the socket address (default :80, or :443 with --domain).
With --domain, the server answers only for that host and uses HTTPS with a
certificate that Caddy obtains and renews.

Zstandard and gzip compression are on, as in 'caddy file-server'; use
--no-compress to turn them off. --precompressed serves sidecar files
(file.txt.gz for file.txt), in the order of preference given.

--browse lists directories that have no index file; --reveal-symlinks and
--file-limit shape the listing. --templates renders templates.

A --root that does not exist or is not a directory is refused.
--version prints the versions of flash_serve and Caddy.`,
		CobraFunc: func(cmd *cobra.Command) {
			cmd.Flags().StringP("domain", "d", "", "Domain name at which to serve the files")
			cmd.Flags().StringP("root", "r", "", "The path to the root of the site")
			cmd.Flags().StringP("listen", "l", "", "The address to which to bind the listener")
			cmd.Flags().BoolP("browse", "b", false, "Enable directory browsing")
			cmd.Flags().BoolP("reveal-symlinks", "", false, "Show symlink paths when browse is enabled.")
			cmd.Flags().BoolP("templates", "t", false, "Enable template rendering")
			cmd.Flags().BoolP("access-log", "a", false, "Enable the access log")
			cmd.Flags().BoolP("debug", "v", false, "Enable verbose debug logs")
			cmd.Flags().IntP("file-limit", "f", fileLimitDefault, "Max directories to read")
			cmd.Flags().BoolP("no-compress", "", false, "Disable Zstandard and Gzip compression")
			cmd.Flags().StringSliceP("precompressed", "p", []string{}, "Specify precompression file extensions. Compression preference implied from flag order.")
			cmd.Flags().Bool("version", false, "Print the versions of flash_serve and Caddy")
			cmd.RunE = runFlashServe
			cmd.SetFlagErrorFunc(flagError)
			cmd.AddCommand(residencyCommand(), prewarmCommand(), exportTemplateCommand())
		},
	})
}

// fileLimitDefault is --file-limit's default, file-server's: the
// listing's default (fileserver's defaultDirEntryLimit, unexported).
const fileLimitDefault = 10000

// runFlashServe runs the flash-serve command. A bad flag or root is
// returned before anything starts, so cobra prints it as one line
// ("Error: ...") and the command exits with status 1.
func runFlashServe(cmd *cobra.Command, _ []string) error {
	fl := caddycmd.Flags{FlagSet: cmd.Flags()}
	if fl.Bool("version") {
		printVersions(cmd.OutOrStdout())
		return nil
	}
	precompressed, err := fl.GetStringSlice("precompressed")
	if err != nil {
		return err
	}
	cfg, err := commandConfig(commandOptions{
		domain:         fl.String("domain"),
		root:           fl.String("root"),
		listen:         fl.String("listen"),
		browse:         fl.Bool("browse"),
		revealSymlinks: fl.Bool("reveal-symlinks"),
		templates:      fl.Bool("templates"),
		accessLog:      fl.Bool("access-log"),
		debug:          fl.Bool("debug"),
		fileLimit:      fl.Int("file-limit"),
		noCompress:     fl.Bool("no-compress"),
		precompressed:  precompressed,
	})
	if err != nil {
		return err
	}
	caddy.TrapSignals()
	if err := caddy.Run(cfg.Config); err != nil {
		return err
	}
	caddy.Log().Info("flash_serve serving static files", zap.String("root", cfg.root), zap.String("listen", cfg.listen))
	select {}
}

// commandOptions are the flags of the flash-serve command, which are
// file-server's with the same meanings.
type commandOptions struct {
	domain, root, listen                         string
	browse, revealSymlinks, templates, accessLog bool
	debug, noCompress                            bool
	fileLimit                                    int
	precompressed                                []string
}

// commandRun is a caddy.Config with what the command prints about it.
type commandRun struct {
	*caddy.Config
	root, listen string
}

// commandConfig builds the JSON config that the command runs: the config
// of `caddy file-server` with the same flags (fileserver/command.go), with
// flash_serve for file_server and its listener wrapper on the server.
func commandConfig(o commandOptions) (commandRun, error) {
	if o.root != "" {
		if err := checkPath("root", o.root, true); err != nil {
			return commandRun{}, err
		}
	}
	var handlers []json.RawMessage
	if !o.noCompress {
		encoders := make(caddy.ModuleMap)
		for _, name := range []string{"zstd", "gzip"} {
			mod, err := caddy.GetModule("http.encoders." + name)
			if err != nil {
				return commandRun{}, err
			}
			encoders[name] = caddyconfig.JSON(mod.New(), nil)
		}
		handlers = append(handlers, caddyconfig.JSONModuleObject(encode.Encode{
			EncodingsRaw: encoders,
			Prefer:       []string{"zstd", "gzip"},
		}, "handler", "encode", nil))
	}
	if o.templates {
		handlers = append(handlers, caddyconfig.JSONModuleObject(caddytpl.Templates{FileRoot: o.root}, "handler", "templates", nil))
	}
	handler := FlashServe{Root: o.root}
	if len(o.precompressed) > 0 {
		mods, err := precompressors(o.precompressed)
		if err != nil {
			return commandRun{}, fmt.Errorf("--precompressed: %w", err)
		}
		handler.PrecompressedRaw, handler.PrecompressedOrder = mods, o.precompressed
	}
	if o.browse {
		handler.Browse = &fileserver.Browse{RevealSymlinks: o.revealSymlinks, FileLimit: o.fileLimit}
	}
	handlers = append(handlers, caddyconfig.JSONModuleObject(handler, "handler", "flash_serve", nil))
	route := caddyhttp.Route{HandlersRaw: handlers}
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
		return commandRun{}, fmt.Errorf("--listen %q is not a network address such as :8080 or 127.0.0.1:8080", listen)
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

// precompressors returns the precompressed modules of the formats named in
// order, for the Caddyfile's `precompressed` and the --precompressed flag.
func precompressors(order []string) (caddy.ModuleMap, error) {
	mods := make(caddy.ModuleMap)
	for _, format := range order {
		modID := "http.precompressed." + format
		mod, err := caddy.GetModule(modID)
		if err != nil {
			return nil, fmt.Errorf("unknown format '%s' (no module %s)", format, modID)
		}
		inst := mod.New()
		pc, ok := inst.(encode.Precompressed)
		if !ok {
			return nil, fmt.Errorf("module %s is not a precompressor; is %T", modID, inst)
		}
		if _, dup := mods[format]; dup {
			return nil, fmt.Errorf("format '%s' is listed twice", format)
		}
		mods[format] = caddyconfig.JSON(pc, nil)
	}
	return mods, nil
}

// checkPath says in one sentence why path, which the command line or the
// admin API calls what ("root", "path"), cannot be served or warmed: it
// does not exist, cannot be read, or is not a directory (dirOnly) or a
// regular file.
func checkPath(what, path string, dirOnly bool) error {
	info, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s %s does not exist", what, path)
	case err != nil:
		return fmt.Errorf("%s %s cannot be read: %w", what, path, errors.Unwrap(err))
	case dirOnly && !info.IsDir():
		return fmt.Errorf("%s %s is not a directory", what, path)
	case !info.IsDir() && !info.Mode().IsRegular():
		return fmt.Errorf("%s %s is neither a directory nor a regular file", what, path)
	}
	return nil
}

// flagError rewrites pflag's error for a value of the wrong type (which
// ends in strconv's "parsing "x": invalid syntax") as one sentence:
// `--file-limit "many" is not a whole number`. Other flag errors (an
// unknown flag, a missing value) are clear already.
func flagError(_ *cobra.Command, err error) error {
	var bad *pflag.InvalidValueError
	if !errors.As(err, &bad) {
		return err
	}
	want := "a valid " + bad.GetFlag().Value.Type()
	switch bad.GetFlag().Value.Type() {
	case "int":
		want = "a whole number"
	case "bool":
		want = "true or false"
	}
	return fmt.Errorf("--%s %q is not %s", bad.GetFlag().Name, bad.GetValue(), want)
}

// exportTemplateCommand is `caddy flash-serve export-template`, as
// file-server's: listings are file_server's, so is their template.
func exportTemplateCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "export-template",
		Short:   "Exports the default file browser template",
		Example: "caddy flash-serve export-template > browse.html",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := io.WriteString(cmd.OutOrStdout(), fileserver.BrowseTemplate)
			return err
		},
	}
}
