// Package conformancehost is a test-only HTTP host that lets the public
// Syncular conformance catalog (a TypeScript ServerDriver talking HTTP)
// drive this module's SSP2 engine. Each instance is an isolated engine
// with a virtual clock and a scriptable scope resolver, over either
// in-memory stores (the default: a journaled memstore, in-memory segments
// and blobs, commits reaching the realtime hub in process) or the
// production stores (Options.Prod: dynamostore, s3segments and s3blobs on
// a table and bucket of its own, realtime fed from the table's stream).
//
// Protocol (all paths relative to the host's base URL):
//
//	GET    /__conformance/info              {"name", "capabilities", ...}
//	POST   /__conformance/instances         ServerCreateOptions → {"id", "methods", "baseUrl"}
//	POST   /i/{id}/sync                     SSP2 bytes, actor in X-Actor (§1.1)
//	GET    /i/{id}/segments/{segmentId}     X-Actor + X-Syncular-Scopes (§5.5) or ?st= (§5.4)
//	GET    /i/{id}/realtime?clientId=&actor=  §8 WebSocket (the driver's connectRealtime)
//	POST   /i/{id}/control/{method}         JSON array of arguments → {"result": …}
//	DELETE /i/{id}                          drop the instance
//
// Control arguments and results are JSON; Uint8Array values travel as
// {"$u8": "<base64>"}. Control failures answer {"error": {"code",
// "message"}} with a 4xx/5xx status. Sync and segment routes are served by
// package httpapi, so their errors are the §10.1 JSON bodies.
package conformancehost

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
)

// Name is the server name reported by the info route.
const Name = "syncular-lambda"

// Capabilities are the catalog ServerCapability names this engine serves.
var Capabilities = []string{"backfill-checkpoints", "backup-restore", "blob-presign", "blobs", "commit-validators", "crdt", "idempotency-fault", "leases", "signed-urls", "validators"}

// Unsupported lists catalog capabilities and features this engine lacks:
// scenarios needing them are skipped (capabilities) or fail (features the
// catalog does not gate: sqlite images).
var Unsupported = []string{
	"sqlite-image",
}

// maxControlBody caps a control request body.
const maxControlBody = 16 << 20

// Options configure a Host.
type Options struct {
	// Logger receives one line per sync/segment request; nil is silent.
	Logger *slog.Logger
	// Prod, when set, runs every instance on the production stores
	// (prodstore.go); nil keeps them in memory.
	Prod *Prod
}

// Host serves the conformance protocol. It is an http.Handler.
type Host struct {
	log  *slog.Logger
	prod *Prod

	mu        sync.Mutex
	next      int
	instances map[string]*instance
}

// New returns an empty Host.
func New(o Options) *Host {
	h := &Host{log: o.Logger, instances: make(map[string]*instance)}
	if o.Prod != nil {
		h.prod = o.Prod.withDefaults()
	}
	return h
}

// Handler returns the Host as an http.Handler.
func (h *Host) Handler() http.Handler { return h }

// ServeHTTP routes one request.
func (h *Host) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.EscapedPath()
	switch {
	case path == "/__conformance/info":
		if r.Method != http.MethodGet {
			writeError(w, http.StatusMethodNotAllowed, codeBadRequest, "use GET")
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"name":         Name,
			"capabilities": Capabilities,
			"unsupported":  Unsupported,
			"methods":      supportedMethods(),
		})
	case path == "/__conformance/instances":
		if r.Method != http.MethodPost {
			writeError(w, http.StatusMethodNotAllowed, codeBadRequest, "use POST")
			return
		}
		h.create(w, r)
	case strings.HasPrefix(path, "/i/"):
		rest := path[len("/i/"):]
		id, sub, _ := strings.Cut(rest, "/")
		inst := h.lookup(id)
		if inst == nil {
			writeError(w, http.StatusNotFound, codeUnknownInstance, fmt.Sprintf("no instance %q", id))
			return
		}
		switch {
		case sub == "" && r.Method == http.MethodDelete:
			h.drop(id)
			w.WriteHeader(http.StatusNoContent)
		case sub == "":
			writeError(w, http.StatusMethodNotAllowed, codeBadRequest, "use DELETE")
		case strings.HasPrefix(sub, "control/"):
			if r.Method != http.MethodPost {
				writeError(w, http.StatusMethodNotAllowed, codeBadRequest, "use POST")
				return
			}
			h.control(w, r, inst, sub[len("control/"):])
		default:
			inst.serveHTTP(w, r)
		}
	default:
		writeError(w, http.StatusNotFound, codeNotFound, "no route for "+r.Method+" "+path)
	}
}

func (h *Host) lookup(id string) *instance {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.instances[id]
}

// drop removes an instance and releases its stores (its table, S3
// server and stream feed on the production stores).
func (h *Host) drop(id string) {
	h.mu.Lock()
	inst := h.instances[id]
	delete(h.instances, id)
	h.mu.Unlock()
	if inst != nil {
		inst.shutdown()
	}
}

// Close drops every instance.
func (h *Host) Close() {
	for _, id := range h.Instances() {
		h.drop(id)
	}
}

// Instances reports the live instance ids, sorted (for tests and logs).
func (h *Host) Instances() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	ids := make([]string, 0, len(h.instances))
	for id := range h.instances {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

func (h *Host) create(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxControlBody))
	if err != nil {
		writeError(w, http.StatusBadRequest, codeBadArgs, "read body: "+err.Error())
		return
	}
	var opts createOptions
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&opts); err != nil {
		writeError(w, http.StatusBadRequest, codeBadArgs, "ServerCreateOptions: "+err.Error())
		return
	}
	h.mu.Lock()
	h.next++
	id := fmt.Sprintf("inst-%d", h.next)
	h.mu.Unlock()
	inst, cerr := newInstance(r.Context(), id, &opts, h.log, h.prod)
	if cerr != nil {
		writeControlError(w, cerr)
		return
	}
	h.mu.Lock()
	h.instances[id] = inst
	h.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{
		"id":      id,
		"methods": supportedMethods(),
		"baseUrl": "http://" + r.Host + "/i/" + id,
	})
}

func (h *Host) control(w http.ResponseWriter, r *http.Request, inst *instance, method string) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxControlBody))
	if err != nil {
		writeError(w, http.StatusBadRequest, codeBadArgs, "read body: "+err.Error())
		return
	}
	var args []json.RawMessage
	if len(strings.TrimSpace(string(body))) > 0 {
		if err := json.Unmarshal(body, &args); err != nil {
			writeError(w, http.StatusBadRequest, codeBadArgs, "control body must be a JSON array of arguments")
			return
		}
	}
	result, cerr := inst.call(r.Context(), method, args)
	if cerr != nil {
		writeControlError(w, cerr)
		return
	}
	if method == "close" {
		h.drop(inst.id)
	}
	writeJSON(w, http.StatusOK, map[string]any{"result": result})
}

// Control error codes (host-level; engine errors keep their catalog code).
const (
	codeBadArgs         = "conformance.bad_args"
	codeBadRequest      = "conformance.bad_request"
	codeNotFound        = "conformance.not_found"
	codeUnknownInstance = "conformance.unknown_instance"
	codeUnknownMethod   = "conformance.unknown_method"
	codeUnsupported     = "conformance.unsupported"
	codeFailed          = "conformance.failed"
)

// controlError is a control failure with its HTTP status.
type controlError struct {
	status  int
	code    string
	message string
}

func (e *controlError) Error() string { return e.code + ": " + e.message }

func badArgs(format string, args ...any) *controlError {
	return &controlError{http.StatusBadRequest, codeBadArgs, fmt.Sprintf(format, args...)}
}

func unsupported(what string) *controlError {
	return &controlError{http.StatusNotImplemented, codeUnsupported, what + " is not supported by " + Name}
}

func failed(err error) *controlError {
	return &controlError{http.StatusInternalServerError, codeFailed, err.Error()}
}

func writeControlError(w http.ResponseWriter, e *controlError) {
	writeError(w, e.status, e.code, e.message)
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": message}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(map[string]any{"error": map[string]string{"code": codeFailed, "message": "encode response: " + err.Error()}})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
