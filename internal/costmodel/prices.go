// Package costmodel prices the operations of a deployment from exact
// counts (invocations, DynamoDB capacity units computed from item sizes,
// request and log bytes) with the list prices below. `make cost` measures
// the counts on DynamoDB Local through the real function handlers
// (cost_test.go) and prints the tables and the per-operation totals.
package costmodel

// Prices are us-east-1 on-demand list prices in USD, as published on
// 2026-12-01 by:
//   - https://aws.amazon.com/lambda/pricing/ (Arm, first price tier)
//   - https://aws.amazon.com/api-gateway/pricing/ (HTTP APIs, first 300M)
//   - https://aws.amazon.com/dynamodb/pricing/on-demand/ (standard table class)
//   - https://aws.amazon.com/cloudwatch/pricing/ (Logs ingestion, standard)
//   - https://aws.amazon.com/elasticloadbalancing/pricing/ (NLB)
//   - https://aws.amazon.com/fargate/pricing/ (Linux/ARM)
//   - https://aws.amazon.com/vpc/pricing/ (public IPv4)
//   - https://aws.amazon.com/secrets-manager/pricing/
//   - https://aws.amazon.com/appsync/pricing/ (the comparison)
type Prices struct {
	LambdaRequest     float64 // per invocation
	LambdaGBSecond    float64 // Arm
	APIRequest        float64 // HTTP API request (each 512 KB counts as one)
	APIRequestChunk   int     // bytes per metered HTTP API request
	DynamoWRU         float64 // per write request unit
	DynamoRRU         float64 // per read request unit
	LogsIngestedPerGB float64 // CloudWatch Logs standard ingestion
	// LogEventOverhead is what CloudWatch Logs bills per event on top of
	// the line (26 bytes of metadata per event).
	LogEventOverhead int

	NLBHour       float64
	NLCUHour      float64
	FargateVCPUH  float64 // Linux/ARM per vCPU-hour
	FargateGBH    float64 // Linux/ARM per GB-hour
	PublicIPv4H   float64
	CustomMetricM float64 // per custom metric per month
	SecretMonth   float64 // Secrets Manager, per secret per month
	SecretCall    float64 // Secrets Manager, per API call

	AppSyncQuery      float64 // per query or mutation operation
	AppSyncRTMessage  float64 // per real-time update message
	AppSyncConnMinute float64 // per real-time connection minute
}

// USEast1 are the prices the tables use.
var USEast1 = Prices{
	LambdaRequest:     0.20 / 1e6,
	LambdaGBSecond:    0.0000133334,
	APIRequest:        1.00 / 1e6,
	APIRequestChunk:   512 << 10,
	DynamoWRU:         0.625 / 1e6,
	DynamoRRU:         0.125 / 1e6,
	LogsIngestedPerGB: 0.50,
	LogEventOverhead:  26,

	NLBHour:       0.0225,
	NLCUHour:      0.006,
	FargateVCPUH:  0.03238,
	FargateGBH:    0.00356,
	PublicIPv4H:   0.005,
	CustomMetricM: 0.30,
	SecretMonth:   0.40,
	SecretCall:    0.05 / 10_000,

	AppSyncQuery:      4.00 / 1e6,
	AppSyncRTMessage:  2.00 / 1e6,
	AppSyncConnMinute: 0.08 / 1e6,
}

// HoursPerMonth is the month the monthly figures use.
const HoursPerMonth = 730
