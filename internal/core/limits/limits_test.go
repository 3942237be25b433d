package limits

import (
	"encoding/base64"
	"testing"
)

// The transport limits hold against the platform quotas they come from:
// the base64 form of the largest body plus its reserve fits 6 MiB, and one
// byte more does not.
func TestTransportLimitsFitLambda(t *testing.T) {
	for _, c := range []struct {
		name          string
		body, reserve int
	}{
		{"request", MaxRequestBodyBytes, EventReserveBytes},
		{"response", MaxResponseBodyBytes, ResponseReserveBytes},
	} {
		if n := base64.StdEncoding.EncodedLen(c.body) + c.reserve; n > LambdaPayloadBytes {
			t.Errorf("%s: %d body bytes become %d with base64 and reserve, over %d", c.name, c.body, n, LambdaPayloadBytes)
		}
		if n := base64.StdEncoding.EncodedLen(c.body+3) + c.reserve; n <= LambdaPayloadBytes {
			t.Errorf("%s: the limit %d is not the largest that fits", c.name, c.body)
		}
	}
	if MaxRequestBodyBytes > APIGatewayRequestBytes {
		t.Errorf("request limit %d passes API Gateway's %d", MaxRequestBodyBytes, APIGatewayRequestBytes)
	}
	if DefaultDecodedBodyBytes < MaxRequestBodyBytes {
		t.Error("an uncompressed body that reaches the function must always be readable")
	}
	if !(DefaultResponseBudgetBytes <= MaxResponseBudgetBytes && MaxResponseBudgetBytes < MaxResponseBodyBytes && MaxCommitFrameBytes <= MaxResponseBudgetBytes) {
		t.Error("response budget, frame and body limits are out of order")
	}
	if MaxCommitBytes >= DynamoTransactionBytes || MaxRowBytes >= DynamoItemBytes {
		t.Error("storage limits leave no room for keys and attributes")
	}
}
