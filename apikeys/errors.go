package apikeys

// The 401 answers, as the APIs kvca serves give them. None echoes the
// presented key, even in part.
const (
	// OpenAIMissing and OpenAIInvalid are OpenAI's error shape.
	OpenAIMissing = `{"error":{"message":"You didn't provide an API key. Provide it in an Authorization header using Bearer auth (Authorization: Bearer YOUR_KEY).","type":"invalid_request_error","param":null,"code":"missing_api_key"}}` + "\n"
	OpenAIInvalid = `{"error":{"message":"Incorrect API key provided.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}` + "\n"
	// AnthropicMissing and AnthropicInvalid are Anthropic's, for
	// /v1/messages.
	AnthropicMissing = `{"type":"error","error":{"type":"authentication_error","message":"x-api-key header is required"}}` + "\n"
	AnthropicInvalid = `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}` + "\n"
)

// UnauthorizedBody returns the body of the 401 answer: Anthropic's shape
// when anthropic (the request was for /v1/messages), OpenAI's otherwise;
// missing tells "no key" from "a key kvca does not know".
func UnauthorizedBody(anthropic, missing bool) string {
	switch {
	case anthropic && missing:
		return AnthropicMissing
	case anthropic:
		return AnthropicInvalid
	case missing:
		return OpenAIMissing
	}
	return OpenAIInvalid
}
