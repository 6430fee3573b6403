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
# An answer with a table, a quote and maths (issue 37 point 6), drawn offscreen by its test.
K3_SCREENSHOT_DIR=docs QT_QPA_PLATFORM=offscreen \
  "${1:-build/dev}/tests/ui/tst_answerrendering" screenshotOfATableWithMaths
# A reopened conversation read again, and the timing chart in the Light and Dark themes
# (issue 37), each a real X11 window made by its test.
K3_SCREENSHOT_DIR=docs QT_QPA_PLATFORM=xcb xvfb-run -a -s "-screen 0 1400x900x24" \
  "${1:-build/dev}/tests/ui/tst_docscreenshots" conversationReadAgain timingChartInBothThemes
# The wizard's memory page for the real model (1.56 TB) at the laptop preset on this
# machine's memory: the full-size checkpoint's config.json and 96 shard headers with the
# tensor bytes as holes, and the trunk `k3 pack` would write for it, also a hole (a few MB
# of disk, about 20 s; tests/bench/synth_checkpoint.cpp --sparse). The page reads no
# tokenizer, so none is written (the real one is not at hand). The first plan checks the
# trunk against the shards, reading ~109 GB of holes (no disk I/O).
fullsize=$(mktemp -d /tmp/k3-fullsize.XXXXXX)
trap 'rm -rf "$home" "$fullsize"' EXIT
"${1:-build/dev}/tests/engine/memory/synth_checkpoint" "$fullsize" --layers 93 --experts 896 \
  --vision 1 --sparse 1
K3_FULLSIZE_MODEL=$fullsize K3_SCREENSHOT_DIR=docs QT_QPA_PLATFORM=xcb \
  xvfb-run -a -s "-screen 0 1400x900x24" "${1:-build/dev}/tests/ui/tst_docscreenshots" memoryPage
rm -rf "$fullsize"
# The conversation list with dates: four saved chats, modified minutes, hours, a day
# and ten days ago.
conversations="$home/data/k3chat/k3chat/conversations"
rm -rf "$conversations" && mkdir -p "$conversations"
chat() { # ID AGE QUESTION ANSWER
  printf '{"role": "user", "content": "%s"}\n{"role": "assistant", "content": "%s"}\n' "$3" "$4" \
    > "$conversations/$1.jsonl"
  touch -d "$2" "$conversations/$1.jsonl"
}
chat 20261120-090000-aaaa "10 days ago" "Which preset fits a 16 GB laptop?" "The laptop preset."
chat 20261129-180000-bbbb "1 day ago" "How big is the checkpoint?" "About 1.56 TB."
chat 20261130-120000-cccc "3 hours ago" "What is MXFP4?" "Four-bit weights with a shared scale."
chat 20261130-150000-dddd "5 minutes ago" "Hello!" "Hello! Ask me about the app."
run --model resources/demo --conversation resources/screenshots/code-and-thinking.jsonl \
    --quit-after 8000 --screenshot docs/screenshot-conversations.png
rm -rf "$conversations"

# The panels while a full-width synthetic checkpoint streams (optional: K3_SYNTH_APP is a
# synthetic checkpoint with a K3 tokenizer beside its shards, K3_SYNTH_TRUNK its packed
# trunk): a 1.5 GB trunk and 0.5 GB cache budget, pictured mid-answer.
if [[ -n "${K3_SYNTH_APP:-}" && -n "${K3_SYNTH_TRUNK:-}" ]]; then
  cat >> "$home/config/k3chat/k3chat.conf" <<CONF
[model]
directory=$K3_SYNTH_APP
trunkDir=$K3_SYNTH_TRUNK
[launch]
preset=
trunkBytes=1500000000
cacheBytes=500000000
CONF
  XDG_CONFIG_HOME="$home/config" XDG_DATA_HOME="$home/data" \
    xvfb-run -a -s "-screen 0 1400x900x24" bash -c '
      "$0" --ask "Tell me about disks." --quit-after 240000 & app=$!
      sleep "${K3_SYNTH_SHOT_AFTER:-120}"
      import -window root -trim +repage docs/screenshot-streaming.png
      kill $app' "$k3chat"
  echo "wrote docs/screenshot-streaming.png"
fi
echo "wrote docs/screenshot-wizard.png docs/screenshot-main.png docs/screenshot-conversation.png docs/screenshot-conversations.png"
echo "wrote docs/screenshot-memory-page.png docs/screenshot-reading-again.png docs/screenshot-timing-light.png docs/screenshot-timing-dark.png"
