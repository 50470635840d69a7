package console_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/edihub/edihub/internal/auth"
)

// TestPartnerEditSecretPaths: the partner editor, like the REST API,
// takes secrets only as names in the secrets directory. A path in
// auth.password_file (/etc/passwd, the absolute path of a one-line file,
// one through ..) is refused with the message naming the reference, and
// nothing is stored; with no secrets directory configured (this console's
// station), a name is refused too, and the fix names EDIHUB_SECRETS_DIR.
func TestPartnerEditSecretPaths(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addUser("ada", auth.RoleAdmin)
	oneLine := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(oneLine, []byte("outside-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	tb := tab(t)
	e.login(t, tb, "ada")
	run(t, tb, "open ACME CORP", chromedp.Navigate(e.page("/partners/ACME%20CORP")), chromedp.WaitVisible(chromedp.CSS("#profile")))
	yaml := eval[string](t, tb, `document.getElementById("profile").value`)
	tests := []struct {
		give, want string
	}{
		{"/etc/passwd", `secret reference "/etc/passwd": not a name in the secrets directory`},
		{oneLine, `secret reference "` + oneLine + `": not a name in the secrets directory`},
		{"../token", `secret reference "../token": not a name in the secrets directory`},
		{"acme-password", `secret reference "acme-password": no secrets directory is configured`},
	}
	for _, tt := range tests {
		bad := strings.TrimRight(yaml, "\n") + "\nauth: {user: edi, password_file: " + tt.give + "}\n"
		run(t, tb, "save password_file "+tt.give, chromedp.SetValue(chromedp.CSS("#profile"), bad), submit("#save"), chromedp.WaitVisible(chromedp.CSS("#profile-error")))
		got := text(t, tb, "#profile-error")
		if !strings.Contains(got, tt.want) || strings.Contains(got, "outside-secret") {
			t.Errorf("save password_file %s: error shown %q, want %q", tt.give, got, tt.want)
		}
		if tt.give == "acme-password" && !strings.Contains(got, "EDIHUB_SECRETS_DIR") {
			t.Errorf("save password_file %s: error shown %q, want the fix naming EDIHUB_SECRETS_DIR", tt.give, got)
		}
		if sp, err := e.st.Partner(e.ctx, "ACME CORP"); err != nil || sp.Version != 1 || strings.Contains(sp.Spec, "password_file") {
			t.Errorf("after a refused save, ACME CORP = version %d (%v):\n%s\nwant version 1 unchanged", sp.Version, err, sp.Spec)
		}
	}
}
