// The Grafana dashboard of mqstore's metrics, written with Grafana's own Go SDK
// (grafana-foundation-sdk), and its check.
//
//	go run . write ../mqstore.json   # (re)writes the dashboard
//	go run . check ../mqstore.json   # the committed file: Grafana's schema, strictly (unknown
//	                                 # keys and wrong types fail), the same as this program
//	                                 # writes, and the metrics it queries on stdout
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

var datasource = common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}

// query is one PromQL query on the selected nodes ($instance).
func query(expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().Datasource(datasource).Expr(expr).LegendFormat(legend)
}

func graph(title, unit, description string, queries ...*prometheus.DataqueryBuilder) *timeseries.PanelBuilder {
	panel := timeseries.NewPanelBuilder().Title(title).Description(description).Unit(unit).
		Datasource(datasource).Min(0).Height(8).Span(12)
	for _, q := range queries {
		panel.WithTarget(q)
	}
	return panel
}

// single is a stat panel, span columns wide (of 24).
func single(title, description string, span uint32, q *prometheus.DataqueryBuilder) *stat.PanelBuilder {
	return stat.NewPanelBuilder().Title(title).Description(description).Datasource(datasource).
		Height(4).Span(span).WithTarget(q.Instant())
}

const on = `{instance=~"$instance"}`

func build() (dashboard.Dashboard, error) {
	instances := dashboard.NewQueryVariableBuilder("instance").Label("node").
		Datasource(datasource).
		Query(dashboard.StringOrMap{String: cog.ToPtr("label_values(mqstore_build_info, instance)")}).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
		Multi(true).IncludeAll(true)
	return dashboard.NewDashboardBuilder("mqstore").
		Uid("mqstore").
		Description("mqstore serve's metrics: the state store, its store (Redis or memory), the broker connection, jobs, commands and the process. Alert rules: deploy/prometheus/mqstore.rules.yml.").
		Tags([]string{"mqstore", "mqtt"}).
		Refresh("30s").
		Time("now-1h", "now").
		Timezone(common.TimeZoneBrowser).
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").Label("Prometheus").Type("prometheus")).
		WithVariable(instances).
		WithRow(dashboard.NewRowBuilder("Nodes")).
		WithPanel(single("Nodes up", "Nodes Prometheus scrapes.", 4, query(`sum(up{job="mqstore"})`, "up"))).
		WithPanel(single("Store up", "Nodes whose store answers (Redis: 0 after a failed call).", 5, query(`sum(mqstore_store_up`+on+`)`, "store"))).
		WithPanel(single("Jobs device API listeners", "Nodes holding the device API lease: 1 across a share group on Redis.", 5, query(`sum(mqstore_jobs_device_api_listener`+on+`)`, "listeners"))).
		WithPanel(single("Nodes answering twice", "The most other nodes any node sees take its requests too (no share group, or another): 0 unless nodes are misconfigured; their log names them.", 5, query(`max(mqstore_clashing_nodes`+on+`)`, "other nodes"))).
		WithPanel(single("Keys", "Keys in the store (each node's view; one store on Redis).", 5, query(`max(mqstore_keys`+on+`)`, "keys"))).
		WithRow(dashboard.NewRowBuilder("State store")).
		WithPanel(graph("Requests", "reqps", "State store requests per second, by command.",
			query(`sum by (command) (rate(mqstore_requests_total`+on+`[$__rate_interval]))`, "{{command}}"))).
		WithPanel(graph("Refused and failed requests", "reqps", "Requests that did not end ok, by outcome (error, rejected, dropped, overloaded).",
			query(`sum by (outcome) (rate(mqstore_requests_total{instance=~"$instance", outcome!="ok"}[$__rate_interval]))`, "{{outcome}}"))).
		WithPanel(graph("Latency", "s", "From a request's arrival to its answer being queued.",
			query(`histogram_quantile(0.5, sum by (le) (rate(mqstore_request_duration_seconds_bucket`+on+`[$__rate_interval])))`, "p50"),
			query(`histogram_quantile(0.99, sum by (le) (rate(mqstore_request_duration_seconds_bucket`+on+`[$__rate_interval])))`, "p99"))).
		WithPanel(graph("Notifications", "ops", "KEYNOTIFY notifications published per second.",
			query(`sum by (instance) (rate(mqstore_notifications_total`+on+`[$__rate_interval]))`, "{{instance}}"))).
		WithPanel(graph("Store contents", "short", "Keys and KEYNOTIFY registrations.",
			query(`max(mqstore_keys`+on+`)`, "keys"),
			query(`max(mqstore_watches`+on+`)`, "watches"))).
		WithPanel(graph("Store bytes", "bytes", "Bytes of keys and values.",
			query(`max(mqstore_bytes`+on+`)`, "bytes"))).
		WithRow(dashboard.NewRowBuilder("Store and broker")).
		WithPanel(graph("Store calls", "short", "Redis calls failed per second, and calls under way.",
			query(`sum by (instance) (rate(mqstore_store_errors_total`+on+`[$__rate_interval]))`, "failed {{instance}}"),
			query(`sum by (instance) (mqstore_store_in_flight`+on+`)`, "in flight {{instance}}"))).
		WithPanel(graph("Broker", "short", "New broker connections (reconnections), answers dropped as too large for the broker, clients reported gone (Will or goodbye), clients whose registrations were dropped.",
			query(`sum by (instance) (increase(mqstore_broker_connections_total`+on+`[$__rate_interval]))`, "connections {{instance}}"),
			query(`sum by (instance) (increase(mqstore_publishes_dropped_total`+on+`[$__rate_interval]))`, "dropped {{instance}}"),
			query(`sum by (instance) (increase(mqstore_clients_gone_total`+on+`[$__rate_interval]))`, "clients gone {{instance}}"),
			query(`sum by (instance) (increase(mqstore_clients_dropped_total`+on+`[$__rate_interval]))`, "registrations dropped {{instance}}"))).
		WithRow(dashboard.NewRowBuilder("Jobs and commands")).
		WithPanel(graph("Jobs requests", "reqps", "Device and operator API requests per second, by outcome; notify and notify-next published.",
			query(`sum by (outcome) (rate(mqstore_jobs_requests_total`+on+`[$__rate_interval]))`, "{{outcome}}"),
			query(`sum(rate(mqstore_jobs_notifications_total`+on+`[$__rate_interval]))`, "notifications"))).
		WithPanel(graph("Device shadows", "reqps", "Device shadow requests per second, by operation and outcome (rejected: AWS's 4xx and 5xx answers); races: requests run again because another node wrote the shadow between their read and their write.",
			query(`sum by (op, outcome) (rate(mqstore_shadow_requests_total`+on+`[$__rate_interval]))`, "{{op}} {{outcome}}"),
			query(`sum(rate(mqstore_shadow_races_total`+on+`[$__rate_interval]))`, "races"))).
		WithPanel(graph("Commands", "ops", "Commands to devices and their answers per second, by event.",
			query(`sum by (event) (rate(mqstore_commands_total`+on+`[$__rate_interval]))`, "{{event}}"))).
		WithRow(dashboard.NewRowBuilder("Process")).
		WithPanel(graph("CPU", "percentunit", "CPU time per second of each node's process.",
			query(`rate(process_cpu_seconds_total{job="mqstore", instance=~"$instance"}[$__rate_interval])`, "{{instance}}"))).
		WithPanel(graph("Memory", "bytes", "Resident memory of each node's process.",
			query(`process_resident_memory_bytes{job="mqstore", instance=~"$instance"}`, "{{instance}}"))).
		WithPanel(graph("Open files", "short", "Open file descriptors (connections included) against the limit.",
			query(`process_open_fds{job="mqstore", instance=~"$instance"}`, "open {{instance}}"),
			query(`process_max_fds{job="mqstore", instance=~"$instance"}`, "limit {{instance}}"))).
		Build()
}

func main() {
	if len(os.Args) != 3 || (os.Args[1] != "write" && os.Args[1] != "check") {
		fmt.Fprintln(os.Stderr, "usage: go run . write|check DASHBOARD.json")
		os.Exit(2)
	}
	built, err := build()
	if err != nil {
		fmt.Fprintln(os.Stderr, "the dashboard does not build:", err)
		os.Exit(1)
	}
	written, err := json.MarshalIndent(built, "", "  ")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	written = append(written, '\n')
	path := os.Args[2]
	if os.Args[1] == "write" {
		if err := os.WriteFile(path, written, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	committed, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	plugins.RegisterDefaultPlugins()
	var read dashboard.Dashboard
	// Both return an empty, non-nil error list when all is well.
	if err := read.UnmarshalJSONStrict(committed); err != nil && err.Error() != "" {
		fmt.Fprintf(os.Stderr, "%s does not follow Grafana's dashboard schema: %v\n", path, err)
		os.Exit(1)
	}
	if err := read.Validate(); err != nil && err.Error() != "" {
		fmt.Fprintf(os.Stderr, "%s is not a valid dashboard: %v\n", path, err)
		os.Exit(1)
	}
	if !bytes.Equal(committed, written) {
		fmt.Fprintf(os.Stderr, "%s is not what deploy/grafana/build writes: run `go run . write %s` there\n", path, path)
		os.Exit(1)
	}
	names := map[string]bool{}
	for _, name := range regexp.MustCompile(`\b(mqstore|process)_[a-z_]+`).FindAllString(string(committed), -1) {
		names[name] = true
	}
	var sorted []string
	for name := range names {
		sorted = append(sorted, name)
	}
	sort.Strings(sorted)
	for _, name := range sorted {
		fmt.Println(name)
	}
}
