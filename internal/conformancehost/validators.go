package conformancehost

import (
	"context"

	"github.com/skyfold/syncular-lambda/internal/core/engine"
	"github.com/skyfold/syncular-lambda/internal/core/validate"
)

// installValidators is the driver's installValidators(specs): the §6.7
// rules of the catalog's declarative kinds, one per table (a later spec
// for a table replaces an earlier one), replacing every row rule; an
// empty list removes them.
func (in *instance) installValidators(_ context.Context, a *args) (any, *controlError) {
	var specs []validate.TableRule
	if e := firstErr(a.arity(1, 1), a.decode(0, "specs", &specs)); e != nil {
		return nil, e
	}
	var rules []validate.TableRule
	at := map[string]int{}
	for _, s := range specs {
		if i, ok := at[s.Table]; ok {
			rules[i] = s
			continue
		}
		at[s.Table] = len(rules)
		rules = append(rules, s)
	}
	return nil, in.applyValidators(rules, in.commitRules)
}

// installCommitValidator is the driver's installCommitValidator(spec?):
// install the §6.8 rule, or remove it when spec is absent.
func (in *instance) installCommitValidator(_ context.Context, a *args) (any, *controlError) {
	if e := a.arity(0, 1); e != nil {
		return nil, e
	}
	var rules []validate.CommitRule
	if a.present(0) {
		var spec validate.CommitRule
		if e := a.decode(0, "spec", &spec); e != nil {
			return nil, e
		}
		rules = []validate.CommitRule{spec}
	}
	return nil, in.applyValidators(in.rowRules, rules)
}

// applyValidators compiles the rules against the instance's schema and
// installs them on every engine of the instance (the realtime tier's
// too: sync rounds over the socket push as well).
func (in *instance) applyValidators(rows []validate.TableRule, commits []validate.CommitRule) *controlError {
	f := validate.RuleFile{Validators: rows, CommitValidators: commits}
	h, err := f.Compile(engine.TableColumns(in.schema))
	if err != nil {
		return badArgs("%v", err)
	}
	for _, e := range in.engines() {
		if err := e.SetValidators(h); err != nil {
			return badArgs("%v", err)
		}
	}
	in.rowRules, in.commitRules = rows, commits
	return nil
}
