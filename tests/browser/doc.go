// Package browser holds the test of the OAuth consent page in a real
// headless browser (Debian's chromium, driven with chromedp): the page
// renders, its form takes a pairing code and submits, and the browser
// lands on the client's redirect URI with code, state and iss (SPEC §5c).
// `cd tests/browser && go test . -update-screenshot` rewrites
// docs/oauth-consent.png from it. It has no code of its own.
package browser
