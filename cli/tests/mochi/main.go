// The Mochi MQTT broker (github.com/mochi-mqtt/server/v2, version pinned in go.mod) as the
// tests start it: one TCP listener on the given address, anyone allowed, and the settings the
// README's "Brokers" section documents. Built by the tests with `go build`.
package main

import (
	"flag"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/listeners"
)

func main() {
	tcp := flag.String("tcp", "127.0.0.1:1883", "address of the TCP listener")
	inherit := flag.Bool("inherit-properties-on-ack", false,
		"leave Mochi's default: PUBACKs copy the PUBLISH's user properties and carry reason code 0x01 (breaks MQTT 5 clients; mochi-mqtt/server#474)")
	maxPacket := flag.Uint("max-packet-size", 0, "largest packet the broker accepts (0: no limit)")
	debug := flag.Bool("debug", false, "log every packet")
	deny := flag.String("deny", "", "a topic filter no client may read or subscribe to (an ACL rule; empty: none)")
	flag.Parse()

	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	options := &mqtt.Options{
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})),
		// Unset fields take Mochi's defaults.
		Capabilities: mqtt.NewDefaultServerCapabilities(),
	}
	options.Capabilities.Compatibilities.NoInheritedPropertiesOnAck = !*inherit
	options.Capabilities.MaximumPacketSize = uint32(*maxPacket)
	server := mqtt.New(options)
	if *deny == "" {
		if err := server.AddHook(new(auth.AllowHook), nil); err != nil {
			log.Fatal(err)
		}
	} else {
		// Everyone connects; what matches the filter nobody reads (a SUBSCRIBE to it is
		// answered 0x87, not authorized) nor writes.
		ledger := &auth.Ledger{
			Auth: auth.AuthRules{{Allow: true}},
			ACL:  auth.ACLRules{{Filters: auth.Filters{auth.RString(*deny): auth.Deny}}},
		}
		if err := server.AddHook(new(auth.Hook), &auth.Options{Ledger: ledger}); err != nil {
			log.Fatal(err)
		}
	}
	if err := server.AddListener(listeners.NewTCP(listeners.Config{ID: "tcp", Address: *tcp})); err != nil {
		log.Fatal(err)
	}

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	if err := server.Serve(); err != nil {
		log.Fatal(err)
	}
	<-signals
	_ = server.Close()
}
