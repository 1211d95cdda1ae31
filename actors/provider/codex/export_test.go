package codex

// for testing: the methods the driver uses, by schema file, and the params
// it sends with each request.
var (
	UsedMethods   = usedMethods
	RequestParams = map[string]any{
		methodInitialize:    initializeParams{},
		methodThreadStart:   threadStartParams{},
		methodThreadResume:  threadResumeParams{},
		methodTurnStart:     turnStartParams{},
		methodTurnInterrupt: turnInterruptParams{},
		methodMCPStatusList: mcpStatusListParams{},
	}
)
