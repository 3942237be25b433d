// Command echo is a throwaway Lambda function for the emulator test: it
// returns its event unchanged, or fails when the event is {"fail": "..."}
// so the test can see how a function error comes back.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
)

func handle(_ context.Context, event json.RawMessage) (json.RawMessage, error) {
	var probe struct {
		Fail string `json:"fail"`
		Env  string `json:"env"`
	}
	_ = json.Unmarshal(event, &probe)
	if probe.Fail != "" {
		return nil, errors.New(probe.Fail)
	}
	if probe.Env != "" {
		return json.Marshal(map[string]string{probe.Env: os.Getenv(probe.Env)})
	}
	return event, nil
}

func main() { lambda.Start(handle) }
