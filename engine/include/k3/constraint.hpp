#pragma once
// Constrained decoding: what the assistant's answer must be (one JSON value of a schema,
// or a call of a named tool), enforced token by token while it is generated.
//
// A JSON schema (a practical subset) is compiled to a grammar; the whole assistant turn
// (the free think channel, then the answer in the template's XTML shape) becomes an
// automaton over bytes and the template's markers. Before each token is sampled the
// session asks whether the sampler's pick is allowed; only when it is not are the allowed
// tokens found (a walk of a byte trie of the vocabulary with the automaton), and the
// token is drawn again among them.
//
// Invariants (tests/engine/chat/tst_constraint):
// - A token the constraint allows is taken as the plain sampler picked it: a constraint
//   that admits the plain answer gives the plain ids, bit for bit (greedy and seeded).
// - Within maxTokens the answer is complete: a token is allowed only if the shortest
//   completion after it still fits in the tokens left (every byte and marker is a token).
// - Only the answer is constrained: the think channel is free text (no marker but its
//   closing one), and the turn then goes straight to the answer's channel.
// - A schema keyword outside the subset is refused with SchemaError naming its path
//   ("properties.age.minimum"); nothing is silently ignored but annotations (title,
//   description, default, examples, $comment, $schema, $id, format, deprecated,
//   readOnly, writeOnly).

#include "k3/chat.hpp"
#include "k3/error.hpp"
#include "k3/tokenizer.hpp"

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace k3 {

// A schema the compiler cannot enforce. path() names the keyword, dot-separated from the
// schema's root ("properties.items.items.type"; empty: the schema itself).
class SchemaError : public Error {
public:
    SchemaError(std::string path, std::string reason);
    const std::string& path() const { return path_; }
    const std::string& reason() const { return reason_; }

private:
    std::string path_, reason_;
};

namespace grammar {
struct Grammar; // engine/private/k3/grammar.hpp
}

// A compiled JSON schema (immutable; copies share it).
//
// The subset: type (one or a list of object, array, string, number, integer, boolean,
// null), properties, required, additionalProperties (false, true or a schema), items,
// minItems, maxItems, minLength, maxLength, enum, const, anyOf, and the annotations
// above. An object with properties is generated with those keys only (each at most
// once, every required one); one without properties takes any keys when
// additionalProperties allows them. enum and const values are written compactly as
// given. Numbers have at most 16 integer and 16 fraction digits and a 3-digit exponent.
class JsonGrammar {
public:
    // Any JSON object (response_format json_object).
    static JsonGrammar anyObject();
    // Any JSON value.
    static JsonGrammar anyValue();
    // Throws SchemaError naming the keyword path; a text that is no JSON too (path "").
    static JsonGrammar fromSchema(std::string_view schemaJson);

    const grammar::Grammar& data() const { return *data_; }
    std::shared_ptr<const grammar::Grammar> shared() const { return data_; }

private:
    explicit JsonGrammar(std::shared_ptr<const grammar::Grammar> data) : data_(std::move(data)) {}
    std::shared_ptr<const grammar::Grammar> data_;
};

// A function a tool_choice may call, with the grammar of its arguments (a JSON object).
struct ToolCallTarget {
    std::string name;
    JsonGrammar arguments = JsonGrammar::anyObject();
};

// What the assistant's turn must be, bound to a tokenizer (it holds the vocabulary's
// byte trie, built once per tokenizer and shared by later constraints). Built once per
// request; shared read-only by the generation that uses it.
class OutputConstraint {
public:
    // The answer (response channel) is one JSON value of `answer`, nothing else: then the
    // channel closes and the turn ends.
    static std::shared_ptr<const OutputConstraint> jsonAnswer(const JsonGrammar& answer,
                                                              const Tokenizer& tokenizer);
    // The answer is one tool call of one of `targets` in the template's tools channel
    // (empty response channel; arguments as the call's json block), then the turn ends.
    static std::shared_ptr<const OutputConstraint>
    toolCall(const std::vector<ToolCallTarget>& targets, const Tokenizer& tokenizer);

    // A call this constraint wrote has its arguments as a json block holding an object:
    // read as the object (compact JSON, the keys in the model's order), so clients get
    // the object as OpenAI's arguments text. Anything else is left as it is.
    void finishReply(ChatMessage& reply) const;

    // Other answer shapes (tests): the grammar and vocabulary of k3/grammar.hpp.
    struct Impl;
    explicit OutputConstraint(std::unique_ptr<Impl> impl);
    ~OutputConstraint();
    const Impl& impl() const { return *impl_; }

private:
    std::unique_ptr<Impl> impl_;
};

} // namespace k3
