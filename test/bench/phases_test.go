package main

import (
	"bufio"
	"bytes"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// The capture sees the info lines a child's console (warnings up) does
// not print, keeps the last of each message with the logger's own
// fields, and both children's outputs read back.
func TestLogCapture(t *testing.T) {
	console, printed := observer.New(zapcore.WarnLevel)
	c := newLogCapture(timingsMessage, builtMessage, sentMessage)
	log := c.logger(zap.New(console)).With(zap.String("partner", "P"))

	log.Info(timingsMessage, zap.Duration("inflate", time.Second))
	log.Info(timingsMessage, zap.Duration("inflate", 2*time.Second), zap.Duration("spool", time.Millisecond))
	log.Info("message received")
	if printed.Len() != 0 {
		t.Fatalf("the console printed %d info lines", printed.Len())
	}
	var out bytes.Buffer
	c.printTimings(&out)
	m := readPhases(bufio.NewReader(&out))
	if m["inflate"] != float64(2*time.Second) || m["spool"] != float64(time.Millisecond) || m["partner"] != "P" {
		t.Fatalf("phases read back %v", m)
	}

	at := time.Now()
	for _, e := range []struct {
		msg string
		at  time.Time
	}{{builtMessage, at}, {sentMessage, at.Add(3 * time.Second)}} {
		if ce := log.Check(zapcore.InfoLevel, e.msg); ce != nil {
			ce.Time = e.at
			ce.Write(zap.Duration("build", 5*time.Second), zap.Int64("size", 1))
		}
	}
	if got, want := c.sendPhases(), " build=5s post=3s"; got != want {
		t.Fatalf("send phases %q, want %q", got, want)
	}
}

// Nothing logged: no phases line, no send phases.
func TestLogCaptureEmpty(t *testing.T) {
	c := newLogCapture(timingsMessage, builtMessage, sentMessage)
	var out bytes.Buffer
	c.printTimings(&out)
	if out.Len() != 0 || c.sendPhases() != "" {
		t.Fatalf("printed %q, send phases %q", out.String(), c.sendPhases())
	}
}
