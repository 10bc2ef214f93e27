// Checks a history of state store operations for linearizability, key by key, with
// porcupine (a Wing–Gong search with P-compositionality). The history comes from
// cli/tests/linearizability.rs: one JSON object per line,
//
//	{"client":3,"key":"k1","op":"set","value":"a","call":1,"ret":9,"out":"ok"}
//
// op: set | setnx | get | del | vdel; out: ok | notapplied | absent | 0 | 1 | a value (get) |
// unknown (no answer: the operation may have taken effect any time after its call, or never;
// such operations end at the end of the history) | refused (known not to have happened: left
// out). Prints a summary; exits 1 on a violation.
//
// A job execution (AWS IoT Jobs' device API) is a key of its own, "job:{thing}:{jobId}", with
// op describe (out "STATUS:version") or update (value "STATUS" or "STATUS@expectedVersion";
// out "ok:STATUS:version", "VersionMismatch" or "InvalidStateTransition"). An execution no
// operation changed yet is QUEUED at version 1.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

type record struct {
	Client int    `json:"client"`
	Key    string `json:"key"`
	Op     string `json:"op"`
	Value  string `json:"value"`
	Call   int64  `json:"call"`
	Ret    int64  `json:"ret"`
	Out    string `json:"out"`
}

type input struct{ op, key, value string }

// state: the key's value, or absent.
type state struct {
	present bool
	value   string
}

// execution: a job execution's status and version (QUEUED at 1 until an operation changed it).
func execution(st state) (string, int) {
	if !st.present {
		return "QUEUED", 1
	}
	status, version, _ := strings.Cut(st.value, ":")
	n, _ := strconv.Atoi(version)
	return status, n
}

// jobStep: AWS's rules for a device's update, in the order the service checks them: the
// expected version, then the transition (a device may set IN_PROGRESS, SUCCEEDED, FAILED or
// REJECTED while the execution is QUEUED or IN_PROGRESS); each accepted update raises the
// version by one.
func jobStep(st state, i input, o string, unknown bool) (bool, interface{}) {
	status, version := execution(st)
	if i.op == "describe" {
		return unknown || o == fmt.Sprintf("%s:%d", status, version), st
	}
	target, expected, versioned := strings.Cut(i.value, "@")
	if versioned && expected != strconv.Itoa(version) {
		return unknown || o == "VersionMismatch", st
	}
	if status != "QUEUED" && status != "IN_PROGRESS" {
		return unknown || o == "InvalidStateTransition", st
	}
	next := fmt.Sprintf("%s:%d", target, version+1)
	return unknown || o == "ok:"+next, state{true, next}
}

func step(s interface{}, in interface{}, out interface{}) (bool, interface{}) {
	st, i, o := s.(state), in.(input), out.(string)
	unknown := o == "unknown"
	if i.op == "describe" || i.op == "update" {
		return jobStep(st, i, o, unknown)
	}
	switch i.op {
	case "set":
		return unknown || o == "ok", state{true, i.value}
	case "setnx":
		if st.present {
			return unknown || o == "notapplied", st
		}
		return unknown || o == "ok", state{true, i.value}
	case "get":
		if unknown {
			return true, st
		}
		if !st.present {
			return o == "absent", st
		}
		return o == "value:"+st.value, st
	case "del":
		if st.present {
			return unknown || o == "1", state{}
		}
		return unknown || o == "0", st
	case "vdel":
		if st.present && st.value == i.value {
			return unknown || o == "1", state{}
		}
		if st.present {
			return unknown || o == "notapplied", st
		}
		return unknown || o == "0", st
	}
	return false, st
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: linearizability HISTORY.jsonl")
		os.Exit(2)
	}
	file, err := os.Open(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var history []porcupine.Operation
	var end int64
	var unknown int
	scanner := bufio.NewScanner(file)
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	var records []record
	for scanner.Scan() {
		var r record
		if err := json.Unmarshal(scanner.Bytes(), &r); err != nil {
			fmt.Fprintln(os.Stderr, "bad history line:", err)
			os.Exit(2)
		}
		records = append(records, r)
		if r.Ret > end {
			end = r.Ret
		}
	}
	var refused int
	for _, r := range records {
		if r.Out == "refused" {
			refused++
			continue
		}
		ret := r.Ret
		if r.Out == "unknown" {
			unknown++
			if r.Op == "get" || r.Op == "describe" {
				continue // a read without an answer constrains nothing
			}
			ret = end + 1
		}
		history = append(history, porcupine.Operation{
			ClientId: r.Client,
			Input:    input{r.Op, r.Key, r.Value},
			Call:     r.Call,
			Output:   r.Out,
			Return:   ret,
		})
	}
	model := porcupine.Model{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			byKey := map[string][]porcupine.Operation{}
			var keys []string
			for _, op := range h {
				k := op.Input.(input).key
				if _, seen := byKey[k]; !seen {
					keys = append(keys, k)
				}
				byKey[k] = append(byKey[k], op)
			}
			var parts [][]porcupine.Operation
			for _, k := range keys {
				parts = append(parts, byKey[k])
			}
			return parts
		},
		Init: func() interface{} { return state{} },
		Step: step,
		DescribeOperation: func(in interface{}, out interface{}) string {
			i := in.(input)
			if i.value == "" {
				return fmt.Sprintf("%s %s -> %s", i.op, i.key, out)
			}
			return fmt.Sprintf("%s %s %s -> %s", i.op, i.key, i.value, out)
		},
		DescribeState: func(s interface{}) string {
			if st := s.(state); st.present {
				return st.value
			}
			return "(absent)"
		},
	}
	// Two minutes for each partition unless MQSTORE_PORCUPINE_SECONDS says otherwise (long
	// nemesis runs make keys of hundreds of thousands of operations).
	limit := 120 * time.Second
	if s, err := strconv.Atoi(os.Getenv("MQSTORE_PORCUPINE_SECONDS")); err == nil && s > 0 {
		limit = time.Duration(s) * time.Second
	}
	// One partition (a key, a job execution) at a time: porcupine checks a model's partitions
	// side by side, and each needs memory in proportion to its operations (3.7 GB for 160,000
	// on one key): the six keys of a 30-minute nemesis run together outgrow the machine.
	parts := model.Partition(history)
	single := model
	single.Partition = nil
	result := porcupine.Ok
	var illegal []porcupine.Operation
	current := make(chan string, len(parts))
	go stopPastMemory(current, os.Args[1])
	for _, part := range parts {
		current <- fmt.Sprintf("%s (%d operations)", part[0].Input.(input).key, len(part))
		switch porcupine.CheckOperationsTimeout(single, part, limit) {
		case porcupine.Illegal:
			result, illegal = porcupine.Illegal, part
		case porcupine.Unknown:
			if result == porcupine.Ok {
				result = porcupine.Unknown
			}
		}
		if result == porcupine.Illegal {
			break
		}
	}
	fmt.Printf("%d operations (%d without an answer; %d more refused, left out) on %d clients: %v\n", len(history), unknown, refused, countClients(records), result)
	if result == porcupine.Illegal {
		// porcupine's visualisation of the key that failed: its longest linearizable prefix,
		// and the operations that cannot follow it.
		_, info := porcupine.CheckOperationsVerbose(single, illegal, limit)
		page := os.Args[1] + ".html"
		if err := porcupine.VisualizePath(single, info, page); err != nil {
			fmt.Fprintln(os.Stderr, "writing the visualisation:", err)
		} else {
			fmt.Printf("visualisation: %s\n", page)
		}
	}
	if result != porcupine.Ok {
		os.Exit(1)
	}
}

// stopPastMemory ends the checker, saying which key it was on, once it holds more memory than
// MQSTORE_PORCUPINE_GB (12 unless told; a fraction is taken): porcupine's search can outgrow
// the machine on a key of many operations without an answer, and a checker that takes the
// machine's memory takes the run (and whatever runs beside it) with it.
func stopPastMemory(current <-chan string, history string) {
	limit := 12.0
	if gb, err := strconv.ParseFloat(os.Getenv("MQSTORE_PORCUPINE_GB"), 64); err == nil && gb > 0 {
		limit = gb
	}
	key := ""
	var stats runtime.MemStats
	for {
		select {
		case key = <-current:
		case <-time.After(time.Second):
		}
		runtime.ReadMemStats(&stats)
		if float64(stats.Sys) > limit*(1<<30) {
			fmt.Printf("Unknown: the checker stopped past %g GB (MQSTORE_PORCUPINE_GB) on key %s of %s\n", limit, key, history)
			os.Exit(3)
		}
	}
}

func countClients(records []record) int {
	clients := map[int]bool{}
	for _, r := range records {
		clients[r.Client] = true
	}
	return len(clients)
}
