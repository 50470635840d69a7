package leader

import (
	"os"
	"testing"

	"github.com/edihub/edihub/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, testenv.CheckLeaks())) }
