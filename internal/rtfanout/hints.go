package rtfanout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
)

// Paths of the hint port.
const (
	HintsPath    = "/internal/hints"
	PresencePath = "/internal/presence"
)

// Body caps of the hint port. A hint batch holds at most one hint per
// partition of a stream batch; a presence event one document (the hub
// caps documents far below this).
const (
	MaxHintsBodyBytes    = 1 << 20
	MaxPresenceBodyBytes = 256 << 10
)

// Hint is one notification: Partition's log reached Seq, or (Head) its
// head changed other than by a commit (epoch rotation, removal).
type Hint struct {
	Partition string `json:"partition"`
	Seq       int64  `json:"seq,omitempty"`
	Head      bool   `json:"head,omitempty"`
}

// Hints is the JSON body of POST /internal/hints.
type Hints struct {
	Hints []Hint `json:"hints"`
}

// HintSink takes hints (a *realtime.Hub). Both calls must not block.
type HintSink interface {
	Hint(partition string, seq int64)
	HintHead(partition string)
}

// Handler serves the hint port: POST /internal/hints into Hints, POST
// /internal/presence into Presence (the tier decodes the event and hands
// it to its hub). Bodies are JSON and size-capped; a good request is
// answered 204. The port is reachable only from the fanout function and
// the other tier tasks (security groups); hints carry no data, so a forged
// one can only cause a log read.
type Handler struct {
	Hints    HintSink
	Presence func(ctx context.Context, body []byte) error
	Logger   *slog.Logger
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var limit int64
	switch r.URL.Path {
	case HintsPath:
		limit = MaxHintsBodyBytes
	case PresencePath:
		if h.Presence == nil {
			http.NotFound(w, r)
			return
		}
		limit = MaxPresenceBodyBytes
	default:
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(w, fmt.Sprintf("body over %d bytes", limit), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	if r.URL.Path == PresencePath {
		if err := h.Presence(r.Context(), body); err != nil {
			h.log().Warn("realtime: presence from a peer refused", "error", err.Error())
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
		return
	}
	var in Hints
	if err := json.Unmarshal(body, &in); err != nil {
		http.Error(w, "body is not a hints document", http.StatusBadRequest)
		return
	}
	for _, hint := range in.Hints {
		if hint.Partition == "" {
			continue
		}
		if hint.Head {
			h.Hints.HintHead(hint.Partition)
		}
		if hint.Seq > 0 {
			h.Hints.Hint(hint.Partition, hint.Seq)
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) log() *slog.Logger {
	if h.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return h.Logger
}
