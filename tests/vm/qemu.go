package vm

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// BootConfig describes one VM run.
type BootConfig struct {
	Kernel  string        // vmlinuz
	Initrd  string        // initramfs (gzip cpio, possibly several concatenated)
	Append  []string      // extra kernel command line words
	Timeout time.Duration // hard limit: the VM is killed after it
	MemMB   int
	SMP     int
	// Disk is a raw image attached as a virtio disk (/dev/vda), written in
	// place (optional).
	Disk string
	// OnLine is called for every console line as it arrives (optional).
	OnLine func(line string)
}

// BootResult is what came out of a run.
type BootResult struct {
	Console  []byte
	Events   Events
	Elapsed  time.Duration
	TimedOut bool
	ExitErr  error
}

// Accel returns the qemu acceleration arguments. Only TCG is used unless
// NVMET_REBIND_E2E_ACCEL=kvm asks for KVM (it does not work on every host
// that has /dev/kvm: some are paravirtual and abort or hang).
func Accel() []string {
	if os.Getenv("NVMET_REBIND_E2E_ACCEL") == "kvm" {
		return []string{"-accel", "kvm", "-cpu", "host"}
	}
	return []string{"-accel", "tcg", "-cpu", "max"}
}

// Boot runs qemu until the guest powers off, prints E2E DONE (qemu is then
// given a few seconds to exit), or the timeout expires.
func Boot(ctx context.Context, cfg BootConfig) (*BootResult, error) {
	qemu, err := LookTool("qemu-system-x86_64")
	if err != nil {
		return nil, err
	}
	if cfg.MemMB == 0 {
		cfg.MemMB = 1024
	}
	if cfg.SMP == 0 {
		cfg.SMP = 2
	}
	// oops=panic: a kernel that oopsed is not trusted further (one that
	// oopsed in ib_isert with irqs off wedged the next scenario until the
	// boot's timeout); with panic=-1 and -no-reboot the VM ends at once.
	appendLine := "console=ttyS0 panic=-1 oops=panic quiet " + strings.Join(cfg.Append, " ")
	args := []string{"-nodefaults", "-nic", "none"}
	args = append(args, Accel()...)
	args = append(args,
		"-smp", fmt.Sprint(cfg.SMP), "-m", fmt.Sprint(cfg.MemMB),
		"-no-reboot", "-serial", "stdio", "-display", "none", "-monitor", "none",
		"-kernel", cfg.Kernel, "-initrd", cfg.Initrd,
		"-append", strings.TrimSpace(appendLine))
	if cfg.Disk != "" {
		args = append(args, "-drive", "file="+cfg.Disk+",format=raw,if=virtio,cache=unsafe")
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	cmd := exec.Command(qemu, args...)
	cmd.Stdin = nil
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	cmd.Stderr = pw
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	res := &BootResult{}
	var mu sync.Mutex
	var console bytes.Buffer
	done := make(chan struct{})
	sawDone := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		closed := false
		for sc.Scan() {
			line := strings.TrimRight(sc.Text(), "\r")
			mu.Lock()
			console.WriteString(line)
			console.WriteByte('\n')
			mu.Unlock()
			if cfg.OnLine != nil {
				cfg.OnLine(line)
			}
			if !closed && strings.Contains(line, "E2E DONE rc=") {
				closed = true
				close(sawDone)
			}
		}
		io.Copy(io.Discard, pr)
	}()
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait(); pw.Close() }()

	select {
	case err := <-waitErr:
		res.ExitErr = err
	case <-sawDone:
		// The guest is powering off; give qemu a moment to exit by itself.
		select {
		case err := <-waitErr:
			res.ExitErr = err
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			res.ExitErr = <-waitErr
		}
	case <-ctx.Done():
		res.TimedOut = true
		cmd.Process.Kill() // our own child, by PID
		res.ExitErr = <-waitErr
	}
	<-done
	res.Elapsed = time.Since(start)
	mu.Lock()
	res.Console = console.Bytes()
	mu.Unlock()
	res.Events = ParseConsole(res.Console)
	return res, nil
}
