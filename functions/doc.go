// Package functions holds the three Lambda mains (push, pull, segment; one
// directory each) and the tests of the deployable surface around them:
// template.yaml against the code (routes, table keys, configuration,
// policies), env.local.json and the sample events in events/, and the
// functions running under the Lambda Runtime Interface Emulator.
package functions
