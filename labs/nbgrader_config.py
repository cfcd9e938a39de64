raise SystemExit
