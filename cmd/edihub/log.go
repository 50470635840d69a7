package main

import (
	"fmt"
	"io"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

type logOptions struct {
	format string
	level  string
}

func (o *logOptions) flags(fs *flagSet) {
	fs.String(&o.format, "log-format", "json", "log format: json or console (human-readable)")
	fs.String(&o.level, "log-level", "info", "least severe level logged: debug, info, warn or error")
}

func (o logOptions) validate() error {
	if o.format != "json" && o.format != "console" {
		return fmt.Errorf("EDIHUB_LOG_FORMAT (-log-format) must be json or console, got %q", o.format)
	}
	if _, err := zapcore.ParseLevel(o.level); err != nil {
		return fmt.Errorf("EDIHUB_LOG_LEVEL (-log-level) must be debug, info, warn or error, got %q", o.level)
	}
	return nil
}

// build makes the process's one logger, writing to w.
func (o logOptions) build(w io.Writer) (*zap.Logger, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	level, _ := zapcore.ParseLevel(o.level)
	var enc zapcore.Encoder
	if o.format == "console" {
		ec := zap.NewDevelopmentEncoderConfig()
		ec.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05.000")
		enc = zapcore.NewConsoleEncoder(ec)
	} else {
		ec := zap.NewProductionEncoderConfig()
		ec.EncodeTime = zapcore.RFC3339NanoTimeEncoder
		ec.TimeKey = "time"
		enc = zapcore.NewJSONEncoder(ec)
	}
	core := zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), level)
	return zap.New(core, zap.AddCaller(), zap.ErrorOutput(zapcore.Lock(zapcore.AddSync(w)))), nil
}
