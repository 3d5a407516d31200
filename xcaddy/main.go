// Command xcaddy is Caddy with its standard modules and flash_serve, the
// same binary that `xcaddy build --with github.com/flashserve/caddy-flash-serve`
// produces:
//
//	go run ./xcaddy flash-serve --root testdata/site --listen 127.0.0.1:8080
//	go build -o caddy ./xcaddy
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/flashserve/caddy-flash-serve"
)

func main() {
	caddycmd.Main()
}
