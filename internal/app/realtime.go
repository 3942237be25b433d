package app

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/skyfold/syncular-lambda/internal/auth"
	"github.com/skyfold/syncular-lambda/internal/config"
	"github.com/skyfold/syncular-lambda/internal/core/syncerr"
	"github.com/skyfold/syncular-lambda/internal/rtaws"
)

// RealtimeJob serves the WebSocket API's $connect, $disconnect and
// $default routes (§8); FanoutJob reads the table's stream and posts
// hellos, deltas and wake-ups to connections (§8.1–§8.3), and on its
// schedule heartbeats (§8.5).
var (
	RealtimeJob = Function{Name: "realtime", LogicalID: "RealtimeFunction", Dir: "functions/realtime"}
	FanoutJob   = Function{Name: "fanout", LogicalID: "FanoutFunction", Dir: "functions/fanout"}
)

// newRealtimeService builds the rtaws service of a deployed function:
// the engine over the table, and the management API at
// SYNC_REALTIME_ENDPOINT (https://{api}.execute-api.{region}.amazonaws.com/{stage}).
func newRealtimeService(ctx context.Context, logger *slog.Logger) (*rtaws.Service, auth.Authenticator, error) {
	cfg, err := config.FromEnv()
	if err != nil {
		return nil, nil, err
	}
	sch, err := loadSchema(cfg)
	if err != nil {
		return nil, nil, err
	}
	// One set of clients (one connection pool) for the engine's store and
	// the connection records.
	clients, err := NewAWSClients(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	deps, err := awsDeps(ctx, cfg, logger, sch, clients)
	if err != nil {
		return nil, nil, err
	}
	eng, err := NewEngine(cfg, deps)
	if err != nil {
		return nil, nil, err
	}
	authn, err := RealtimeAuthenticator(cfg)
	if err != nil {
		return nil, nil, err
	}
	return &rtaws.Service{
		DB: clients.DynamoDB, Table: cfg.TableName, Engine: eng, Store: deps.Store, Logger: logger,
		Posts: rtaws.NewMgmt(os.Getenv("SYNC_REALTIME_ENDPOINT"), clients.Config.Region, clients.Config.Credentials),
	}, authn, nil
}

// RealtimeAuthenticator is the $connect authenticator. API Gateway has no
// JWT authorizer for WebSocket APIs, so in jwt-authorizer mode the
// function verifies the token itself with the HTTP API authorizer's rules
// (auth.OIDC: SYNC_JWT_ISSUER, SYNC_JWT_AUDIENCE as a comma list, keys by
// OIDC discovery). Claims of a Lambda authorizer an operator attached to
// $connect still take precedence. Without an issuer and audience the
// function accepts only such authorizer claims (fail closed).
func RealtimeAuthenticator(cfg *config.Config) (auth.Authenticator, error) {
	a, err := Authenticator(cfg)
	if err != nil || cfg.AuthMode != config.AuthJWTAuthorizer {
		return a, err
	}
	var auds []string
	for _, s := range strings.Split(cfg.JWTAudience, ",") {
		if s = strings.TrimSpace(s); s != "" {
			auds = append(auds, s)
		}
	}
	if cfg.JWTIssuer == "" || len(auds) == 0 {
		return a, nil
	}
	m := auth.Mapping{ActorClaim: cfg.ActorClaim, PartitionClaim: cfg.PartitionClaim, DefaultPartition: cfg.DefaultPartition}
	return &auth.FirstOf{
		Authorizer: &auth.AuthorizerClaims{Mapping: m},
		Token:      &auth.OIDC{Issuer: cfg.JWTIssuer, Audiences: auds, Mapping: m, Leeway: 30 * time.Second},
	}, nil
}

// RealtimeHandler handles the WebSocket routes.
type RealtimeHandler struct {
	Service *rtaws.Service
	Auth    auth.Authenticator
	Logger  *slog.Logger
}

// Handle serves one WebSocket route event. $connect authenticates like
// /sync (§8.1): Authorization: Bearer, or the token / access_token query
// parameter that browsers must use; with SYNC_AUTH_MODE=jwt-authorizer
// the token is verified against the issuer's keys (RealtimeAuthenticator),
// or the claims come from a Lambda authorizer's context on $connect. A
// token that is not accepted is refused with 401; when the issuer's keys
// cannot be fetched the token was not judged, and the refusal is a
// retryable 500 (sync.internal_error), so clients retry instead of treating
// their credentials as bad.
func (h *RealtimeHandler) Handle(ctx context.Context, ev events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
	rc := ev.RequestContext
	switch rc.RouteKey {
	case "$connect":
		authz := ev.Headers["Authorization"]
		if authz == "" {
			authz = ev.Headers["authorization"]
		}
		if authz == "" {
			tok := ev.QueryStringParameters["token"]
			if tok == "" {
				tok = ev.QueryStringParameters["access_token"]
			}
			if tok != "" {
				authz = "Bearer " + tok
			}
		}
		cr := auth.Credentials{Authorization: authz}
		if m, ok := rc.Authorizer.(map[string]any); ok && len(m) > 0 {
			cr.AuthorizerClaims = auth.Claims(m)
		}
		a, claims, err := h.Auth.Authenticate(ctx, cr)
		if errors.Is(err, auth.ErrKeysUnavailable) {
			h.Logger.Error("realtime connect: issuer keys unavailable", "error", err.Error())
			return refuse(syncerr.Internal(err)), nil
		}
		if err != nil {
			return refuse(syncerr.New(syncerr.AuthRequired, "authentication failed: %v", err)), nil
		}
		// The scope resolver of the default claims mode reads the token's
		// claims from the context, as on /sync.
		ctx = auth.WithClaims(ctx, claims)
		if err := h.Service.Connect(ctx, rc.ConnectionID, a, ev.QueryStringParameters["clientId"]); err != nil {
			h.Logger.Info("realtime connect refused", "error", err.Error())
			return refuse(err), nil
		}
	case "$disconnect":
		if err := h.Service.Disconnect(ctx, rc.ConnectionID); err != nil {
			return events.APIGatewayProxyResponse{StatusCode: 500}, err
		}
	default:
		if err := h.Service.Message(ctx, rc.ConnectionID, []byte(ev.Body)); err != nil {
			h.Logger.Warn("realtime message", "error", err.Error())
		}
	}
	return events.APIGatewayProxyResponse{StatusCode: 200}, nil
}

func refuse(err error) events.APIGatewayProxyResponse {
	se := syncerr.As(err)
	if se == nil {
		se = syncerr.Internal(err)
	}
	b, _ := json.Marshal(map[string]string{"code": string(se.Code), "message": se.Message})
	return events.APIGatewayProxyResponse{StatusCode: se.HTTPStatus(), Body: string(b)}
}

// HandleStream fans out one batch of table stream records.
func HandleStream(s *rtaws.Service) func(ctx context.Context, ev events.DynamoDBEvent) error {
	return func(ctx context.Context, ev events.DynamoDBEvent) error {
		recs := make([]rtaws.Record, 0, len(ev.Records))
		for _, r := range ev.Records {
			pk, sk := r.Change.Keys["pk"], r.Change.Keys["sk"]
			if pk.DataType() != events.DataTypeString || sk.DataType() != events.DataTypeString {
				continue
			}
			recs = append(recs, rtaws.Record{Insert: r.EventName == "INSERT", PK: pk.String(), SK: sk.String()})
		}
		_, err := s.HandleStream(ctx, recs)
		return err
	}
}

// HeartbeatEvent is the input of the fanout function's schedule
// (template.yaml FanoutFunction, HeartbeatSchedule): {"heartbeat": true}.
type HeartbeatEvent struct {
	Heartbeat bool `json:"heartbeat"`
}

// HandleFanout is the fanout function's handler: a scheduled heartbeat
// event sends a §8.5 heartbeat to every live connection
// (rtaws.Service.Heartbeat, which stops before the invocation's
// deadline); anything else is a batch of table stream records.
func HandleFanout(s *rtaws.Service) func(ctx context.Context, ev FanoutEvent) error {
	stream := HandleStream(s)
	return func(ctx context.Context, ev FanoutEvent) error {
		if ev.Heartbeat {
			res, err := s.Heartbeat(ctx, 0)
			if s.Logger != nil {
				s.Logger.Info("realtime heartbeat", "sent", res.Sent, "gone", res.Gone, "failed", res.Failed, "stopped", res.Stopped)
			}
			return err
		}
		return stream(ctx, ev.DynamoDBEvent)
	}
}

// FanoutEvent is either input of the fanout function, decoded in one
// pass (a stream batch is not parsed twice to learn it is no heartbeat).
type FanoutEvent struct {
	HeartbeatEvent
	events.DynamoDBEvent
}

func jobMain(fn Function, handler func(*rtaws.Service, auth.Authenticator, *slog.Logger) any) {
	runJob(fn, func(logger *slog.Logger) (any, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
		defer cancel()
		s, authn, err := newRealtimeService(ctx, logger)
		if err != nil {
			return nil, err
		}
		return handler(s, authn, logger), nil
	})
}

// RealtimeMain is the whole main of the realtime function.
func RealtimeMain() {
	jobMain(RealtimeJob, func(s *rtaws.Service, a auth.Authenticator, l *slog.Logger) any {
		return (&RealtimeHandler{Service: s, Auth: a, Logger: l}).Handle
	})
}

// FanoutMain is the whole main of the fanout function.
func FanoutMain() {
	jobMain(FanoutJob, func(s *rtaws.Service, _ auth.Authenticator, _ *slog.Logger) any {
		return HandleFanout(s)
	})
}
