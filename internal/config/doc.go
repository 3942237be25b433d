package config

import "strings"

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
	return b.String()
}
