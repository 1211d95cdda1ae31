package claude

// for testing: Claude Code's arguments for a configuration.
var ClaudeArgs = claudeArgs
