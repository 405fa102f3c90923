#!/usr/bin/env bash
command -v chromium >/dev/null || echo "install-chromium: placeholder until the report helper lands"
