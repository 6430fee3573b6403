#!/usr/bin/env bash
# Makes the README/docs screenshots from real k3chat windows under Xvfb (X11, so the
# picture is what the screen shows: dialogs included). Run after a dev build:
#   docs/make-screenshots.sh [BUILD_DIR=build/dev]
# Colours in code blocks need a build with KSyntaxHighlighting (Debian 13+).
set -euo pipefail
cd "$(dirname "$0")/.."
k3chat=${1:-build/dev}/app/k3chat
home=$(mktemp -d)
trap 'rm -rf "$home"' EXIT
mkdir -p "$home/config/k3chat"
# Think blocks expanded for the picture (View > Keep thinking expanded).
printf '[chat]\nkeepThinkingExpanded=true\n[setup]\nfirstRunDone=true\n' > "$home/config/k3chat/k3chat.conf"
run() { XDG_CONFIG_HOME="$home/config" XDG_DATA_HOME="$home/data" \
          xvfb-run -a -s "-screen 0 1400x900x24" "$k3chat" "$@"; }

# The setup wizard's first page over the demo, after its system check has run.
run --model resources/demo --setup --quit-after 9000 --screenshot docs/screenshot-wizard.png
# A saved conversation with its think block and a code block, then the demo answering
# a new question (the panels fill in), pictured when the answer ends.
run --model resources/demo --conversation resources/screenshots/code-and-thinking.jsonl \
    --ask "What is MXFP4?" --screenshot docs/screenshot-main.png --quit-after 60000
# Line breaks in a question and an answer, and a code line wider than the message
# (it wraps, its Copy button in view), with the demo answering one more question.
run --model resources/demo --conversation resources/screenshots/multiline-and-long-code.jsonl \
    --ask "Hello" --screenshot docs/screenshot-conversation.png --quit-after 60000
echo "wrote docs/screenshot-wizard.png docs/screenshot-main.png docs/screenshot-conversation.png"
