package config

import (
	"strconv"
	"strings"

	"github.com/skyfold/syncular-lambda/internal/core/limits"
)

// Markdown renders Vars as the configuration table of docs/CONFIG.md.
func Markdown() string {
	var b strings.Builder
	b.WriteString("# Configuration\n\n")
	b.WriteString("Every function reads these environment variables once, at init. A bad value\n")
	b.WriteString("stops the function with one `init failed` log line naming each offending\n")
	b.WriteString("variable. Empty counts as unset (the SAM template declares every variable, so\n")
	b.WriteString("`sam local --env-vars env.local.json` can override it).\n\n")
	b.WriteString("Generated from `internal/config` (`UPDATE_CONFIG_DOC=1 go test ./internal/config`).\n\n")
	b.WriteString("| Variable | Default | Meaning |\n|---|---|---|\n")
	for _, v := range Vars {
		b.WriteString("| `" + v.Name + "` | " + v.Default + " | " + strings.ReplaceAll(v.Doc, "|", `\|`) + " |\n")
	}
	b.WriteString("\nSet by the template for the realtime functions only (read by `internal/app`,\n")
	b.WriteString("not validated at init):\n\n")
	b.WriteString("| Variable | Default | Meaning |\n|---|---|---|\n")
	for _, v := range RealtimeVars {
		b.WriteString("| `" + v.Name + "` | " + v.Default + " | " + strings.ReplaceAll(v.Doc, "|", `\|`) + " |\n")
	}
	b.WriteString(limitsMarkdown())
	return b.String()
}

// RealtimeVars are the variables the realtime and fanout functions read
// outside Load (internal/app/realtime.go), documented beside Vars.
var RealtimeVars = []Var{}

// limitsMarkdown renders the fixed size limits of internal/core/limits,
// so the documented numbers are the enforced ones.
func limitsMarkdown() string {
	var b strings.Builder
	n := func(v int) string { return "`" + strconv.Itoa(v) + "`" }
	b.WriteString("\n## Size limits\n\n")
	b.WriteString("Derived once, in `internal/core/limits`, from the platform quotas; the Lambda\n")
	b.WriteString("adapter, the local runner (`make run`) and every store enforce the same numbers.\n\n")
	b.WriteString("| Limit | Bytes | Why | Over the limit |\n|---|---|---|---|\n")
	rows := [][4]string{
		{"Request body as sent", n(limits.MaxRequestBodyBytes), "Lambda's 6 MiB invocation payload holds the body base64 encoded, beside the event's headers and context (API Gateway's own cap is 10 MB)", "never reaches the function: API Gateway answers 413 itself (counted by the `RequestsOverCapAlarm`); the local runner answers 413 `sync.too_many_operations` with a message saying what to change. Stock clients batch up to 500 operations per request without a byte cap, so keep rows small enough that a batch fits, or have clients gzip their pushes (docs/LIMITS.md)"},
		{"Request body after gzip decoding", "`SYNC_MAX_BODY_BYTES`", "guards against gzip bombs; never below the previous line, so an uncompressed body is always read", "413 `sync.too_many_operations` (details `limit: decoded`)"},
		{"Response body as sent", n(limits.MaxResponseBodyBytes), "the same 6 MiB payload with the base64 body and headers", "500 (logged with that status); cannot happen for commits accepted under these limits"},
		{"Response budget (`SYNC_RESPONSE_BUDGET_BYTES`)", "at most " + n(limits.MaxResponseBudgetBytes), "room for the frames written after the last budget check", "the response stops early (§4.5); later push results are answered `sync.idempotency_cache_miss` (retryable, not stored) and the client resends those commits"},
		{"One commit's changes", n(limits.MaxCommitBytes), "one DynamoDB TransactWriteItems (4 MB) holds the log entry, outcome and head", "that commit is rejected with `sync.constraint_violation` (stored); the rest of the request proceeds"},
		{"One COMMIT frame (one table's changes of a commit)", n(limits.MaxCommitFrameBytes), "every pull must be able to deliver it whole (§4.5)", "rejected at push time with `sync.constraint_violation`"},
		{"One row (rowId, scopes, payload)", n(limits.MaxRowBytes), "DynamoDB's 400 KB item with this project's key prefixes", "rejected with `sync.constraint_violation`"},
		{"`clientId`", n(limits.MaxClientIDBytes), "DynamoDB key limits with this project's key prefixes", "request-level 400 `sync.invalid_client_id`"},
		{"`clientCommitId`", n(limits.MaxClientCommitIDBytes), "idempotency record sort key", "that commit is rejected with `sync.invalid_request` (not stored: the same id always gets the same answer)"},
		{"`rowId` (the primary key value as text), non-empty", n(limits.MaxRowIDBytes), "row sort key", "that commit is rejected with `sync.invalid_request`"},
		{"Scope value", n(limits.MaxScopeValueBytes), "stored with every row and change", "in a row: the commit is rejected with `sync.invalid_request`; in a subscription: request-level 400 `sync.invalid_request`"},
		{"Table name", n(limits.MaxTableNameBytes), "row partition key; the schema loader refuses longer names", "in a push: the commit is rejected with `sync.invalid_request`; in a subscription: request-level 400 `sync.invalid_request`"},
		{"Partition name (from the token)", n(limits.MaxPartitionBytes), "every partition key embeds it", "request-level 400 `sync.invalid_request`"},
	}
	for _, r := range rows {
		b.WriteString("| " + r[0] + " | " + r[1] + " | " + r[2] + " | " + r[3] + " |\n")
	}
	return b.String()
}
