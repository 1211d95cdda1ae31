package session

import "testing"

func TestOwnerOwns(t *testing.T) {
	tests := []struct {
		name      string
		owner     Owner
		namespace string
		want      bool
	}{
		{"same provider credential", Owner{Namespace: "cred:a"}, "cred:a", true},
		{"rotated credential is another principal", Owner{Namespace: "cred:a"}, "cred:b", false},
		{"client grant keeps its sessions", Owner{Namespace: "client:x"}, "client:x", true},
		{"client vs provider", Owner{Namespace: "client:x"}, "cred:x", false},
		{"empty owner owns nothing", Owner{}, "", false},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			if got := test.owner.Owns(test.namespace); got != test.want {
				t.Errorf("Owner{%q}.Owns(%q) = %v, want %v", test.owner.Namespace, test.namespace, got, test.want)
			}
		})
	}
}
