package principal

import "testing"

func TestNamespaces(t *testing.T) {
	tests := []struct {
		name     string
		ns       string
		wantKind string
		wantID   string
		wantOK   bool
	}{
		{"provider", ProviderNamespace("cred_1"), KindProvider, "cred_1", true},
		{"client", ClientNamespace("cl_2"), KindClient, "cl_2", true},
		{"empty provider id", "cred:", "", "", false},
		{"empty client id", "client:", "", "", false},
		{"unknown prefix", "user:x", "", "", false},
		{"empty", "", "", "", false},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			kind, id, ok := ParseNamespace(test.ns)
			if kind != test.wantKind || id != test.wantID || ok != test.wantOK {
				t.Errorf("ParseNamespace(%q) = %q, %q, %v; want %q, %q, %v", test.ns, kind, id, ok, test.wantKind, test.wantID, test.wantOK)
			}
		})
	}
	if ProviderNamespace("x") == ClientNamespace("x") {
		t.Error("a provider and a client with the same id share a namespace")
	}
}

func TestProvider(t *testing.T) {
	if !(Principal{Kind: KindProvider}).Provider() || (Principal{Kind: KindClient}).Provider() {
		t.Error("Provider() must be true exactly for provider credentials")
	}
}
