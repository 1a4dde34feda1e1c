package testsupport

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
)

// IP runs iproute2's ip with args (as the tests that make network
// namespaces and veth pairs do) and returns its output with the error
// when it fails.
func IP(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}
