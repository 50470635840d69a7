package leader

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/edihub/edihub/internal/postgres/pgtest"
)

func TestMain(m *testing.M) {
	code := pgtest.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}
