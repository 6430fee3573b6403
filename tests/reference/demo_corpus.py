#!/usr/bin/env python3
"""The demo model's training corpus: short ASCII Q/A pairs about k3chat.

Each topic has a few question phrasings and ONE answer, so a tiny model can learn a
deterministic mapping; template variations (greetings, politeness, punctuation, case)
multiply the phrasings. Deterministic: no randomness here, the trainer shuffles with
its own seed.
"""

TOPICS = [
    (["Hello", "Hi", "Hey", "Hi there", "Hello there", "Good morning", "Good evening",
      "Hey there", "Greetings", "Howdy"],
     "Hello! I am the tiny demo model of k3chat. Ask me about the app."),
    (["How are you", "How are you doing", "How is it going", "Are you well"],
     "I am fine, thank you. I am a tiny model, so my answers are short."),
    (["Who are you", "What are you", "What is your name", "Introduce yourself",
      "Tell me about yourself"],
     "I am a tiny demo model with the Kimi K3 architecture, bundled with k3chat."),
    (["What is k3chat", "What does k3chat do", "Tell me about k3chat", "Explain k3chat",
      "What is this app", "What is this program"],
     "k3chat is a desktop app that runs the Kimi K3 model on your CPU by streaming its weights from disk."),
    (["What is Kimi K3", "Tell me about Kimi K3", "What is K3", "Explain Kimi K3"],
     "Kimi K3 is a large mixture of experts model from Moonshot AI with about 1.56 TB of weights."),
    (["What is MXFP4", "Explain MXFP4", "What does MXFP4 mean", "How does MXFP4 work",
      "Tell me about MXFP4"],
     "MXFP4 stores each weight in 4 bits, with one shared power of two scale for every 32 weights."),
    (["What is a preset", "How do I pick a preset", "Which preset should I use",
      "How do I choose a preset", "What preset is best for me"],
     "Pick the preset that fits your RAM: laptop for 16 GB, desktop for 32 GB, workstation for 96 GB."),
    (["What is the laptop preset", "Tell me about the laptop preset"],
     "The laptop preset keeps 3 GB of trunk and 1 GB of experts in memory."),
    (["What is the ultra preset", "Tell me about the ultra preset"],
     "The ultra preset streams almost everything from disk, so it runs in about 3 GB of RAM."),
    (["How much RAM do I need", "How much memory do I need", "What are the memory requirements"],
     "You can start with about 8 GB of RAM. More memory means more cached experts and faster tokens."),
    (["Why is it slow", "Why is generation slow", "Why are tokens slow", "How can I make it faster"],
     "Each token reads experts from disk. A faster disk and more RAM for the expert cache help most."),
    (["What is an expert", "What are experts", "What is a mixture of experts"],
     "An expert is a small feed forward network. The router picks 16 of 896 experts for each token."),
    (["What is the expert cache", "Tell me about the expert cache"],
     "The expert cache keeps recently used experts in RAM, so they are not read from disk again."),
    (["What is KDA", "Explain KDA", "What is Kimi Delta Attention"],
     "KDA is a linear attention layer with a fixed size state, so it needs no growing cache."),
    (["What is MLA", "Explain MLA", "What is latent attention"],
     "MLA is attention that caches a small latent vector per token instead of full keys and values."),
    (["How do I download the model", "Where do I get the model", "How do I get the weights"],
     "Open the setup wizard and choose download. It fetches the shards and checks each one."),
    (["What is the trunk", "What does packing the trunk do"],
     "The trunk is every weight except the routed experts. Packing puts it in one file for fast reads."),
    (["What is the doctor", "What does the doctor check"],
     "The doctor checks your CPU, RAM and disk, then suggests a preset."),
    (["Is my data private", "Does k3chat send my chats anywhere", "Is it private"],
     "Yes. k3chat runs locally and your chats stay on your computer."),
    (["Do I need a GPU", "Does it use the GPU", "Can it run without a GPU"],
     "No GPU is needed. k3chat runs the whole model on the CPU."),
    (["What can you do", "What can I ask you", "Help"],
     "I can answer short questions about k3chat, presets, MXFP4 and the model."),
    (["Thank you", "Thanks", "Thanks a lot", "Great, thanks"],
     "You are welcome! Enjoy k3chat."),
    (["Goodbye", "Bye", "See you", "Good night"],
     "Goodbye! Load the real model when you want longer answers."),
    (["Tell me a joke", "Say something funny", "Do you know a joke"],
     "Why did the expert stay home? It was not selected by the router."),
    (["What is 2+2", "What is two plus two"],
     "2+2 is 4."),
    (["Where are my chats saved", "How are conversations saved"],
     "Each conversation is saved as a JSONL transcript and listed in the sidebar."),
]

PREFIXES = ["", "Hi! ", "Hey, ", "Please tell me: ", "Quick question: ", "Hello. "]
GREETINGS_TOPIC = 0


def questions(base):
    """Variations of one phrasing: politeness prefixes, punctuation, case."""
    out = []
    greeting = base in TOPICS[GREETINGS_TOPIC][0] or base.lower().startswith(("how are", "thank", "bye", "good"))
    ends = ["!", ".", ""] if greeting else ["?", "", " ?"]
    for i, pre in enumerate(PREFIXES if not greeting else [""]):
        for j, end in enumerate(ends):
            q = pre + base + end
            if (i + j) % 3 == 1:
                q = q.lower()
            out.append(q)
    return out


def pairs():
    """[(question, answer)] in a fixed order."""
    out = []
    for qs, a in TOPICS:
        for q in qs:
            for v in questions(q):
                out.append((v, a))
    return out


if __name__ == "__main__":
    p = pairs()
    print(len(p), "pairs,", len(TOPICS), "topics")
    for q, a in p[::40]:
        print(repr(q), "->", a)
