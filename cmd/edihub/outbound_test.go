package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWebhookSecret: the secret is the file's content without surrounding
// white space; a missing or empty file is an error naming the setting that
// never quotes the file's content.
func TestWebhookSecret(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name    string
		file    string
		want    string
		wantErr string
	}{
		{name: "trailing newline", file: write("ok", "s3cr3t-value\n"), want: "s3cr3t-value"},
		{name: "blank", file: write("blank", " \n\t\n"), wantErr: "is empty"},
		{name: "missing", file: filepath.Join(dir, "nope"), wantErr: "EDIHUB_WEBHOOK_SECRET_FILE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := outboundOptions{webhookURL: "https://b.example/hook", webhookSecretFile: tt.file}
			got, err := o.webhookSecret()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("webhookSecret() = %q, %v; want an error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || string(got) != tt.want {
				t.Errorf("webhookSecret() = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	if got, err := (outboundOptions{}).webhookSecret(); got != nil || err != nil {
		t.Errorf("no webhook: webhookSecret() = %q, %v; want nothing", got, err)
	}
}
