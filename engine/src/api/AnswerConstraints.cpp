// response_format and a required tool_choice: the grammars the answer is held to, compiled
// while the request is parsed, so a schema outside the subset is a 400 naming its keyword.
#include "api/RequestFields.hpp"
#include "k3/api.hpp"
#include "k3/constraint.hpp"

namespace k3::api {

namespace detail {

namespace {

JsonGrammar compileSchema(const Json& schema, const std::string& field) {
    try {
        return JsonGrammar::fromSchema(schema.dump());
    } catch (const SchemaError& e) {
        throw bad(e.path().empty() ? field : field + "." + e.path(), e.reason());
    }
}

void jsonSchemaFormat(const Json& js, ChatRequest& r) {
    const std::string field = "response_format.json_schema";
    if (!js.is_object()) throw wrongType(field, "an object", js);
    if (has(js, "name")) stringField(js["name"], field + ".name");
    if (has(js, "strict") && !js["strict"].is_boolean())
        throw wrongType(field + ".strict", "a boolean", js["strict"]);
    if (!has(js, "schema")) throw bad(field + ".schema", "required");
    const Json& schema = js["schema"];
    if (!schema.is_object() && !schema.is_boolean())
        throw wrongType(field + ".schema", "an object", schema);
    r.answerGrammar = compileSchema(schema, field + ".schema");
    r.render.responseSchemaJson = schema.dump();
}

} // namespace

void responseFormat(const Json& doc, ChatRequest& r) {
    if (!has(doc, "response_format")) return;
    const Json& rf = doc["response_format"];
    if (!rf.is_object()) throw wrongType("response_format", "an object", rf);
    if (!has(rf, "type")) throw bad("response_format.type", "required");
    const std::string type = stringField(rf["type"], "response_format.type");
    if (type == "text") return;
    if (type == "json_object") {
        r.answerGrammar = JsonGrammar::anyObject();
    } else if (type == "json_schema") {
        if (!has(rf, "json_schema")) throw bad("response_format.json_schema", "required");
        jsonSchemaFormat(rf["json_schema"], r);
    } else {
        throw bad("response_format.type",
                  "\"" + type + "\" is not text, json_object or json_schema");
    }
    r.render.responseFormat = type;
}

void requiredCall(const Json& doc, ChatRequest& r) {
    if (r.render.toolChoice != "required") return;
    // The named function, when one is named (tool_choice or the legacy function_call).
    std::string named, namedField;
    if (has(doc, "tool_choice") && doc["tool_choice"].is_object()) {
        named = doc["tool_choice"]["function"]["name"].get<std::string>();
        namedField = "tool_choice.function.name";
    } else if (has(doc, "function_call") && doc["function_call"].is_object()) {
        named = doc["function_call"]["name"].get<std::string>();
        namedField = "function_call.name";
    }
    const bool legacy = has(doc, "functions");
    const Json& tools = legacy ? doc["functions"] : has(doc, "tools") ? doc["tools"] : Json();
    if (!tools.is_array() || tools.empty())
        throw bad(namedField.empty() ? "tool_choice" : namedField,
                  "a call is required but the request declares no tools");
    for (std::size_t i = 0; i < tools.size(); ++i) {
        const std::string at = legacy ? "functions[" + std::to_string(i) + "]"
                                      : "tools[" + std::to_string(i) + "].function";
        const Json& fn = legacy ? tools[i] : tools[i]["function"];
        ToolCallTarget target{fn["name"].get<std::string>()};
        if (!named.empty() && target.name != named) continue;
        if (has(fn, "parameters")) {
            const Json& p = fn["parameters"];
            if (p.is_object() && has(p, "type") && p["type"] != "object")
                throw bad(at + ".parameters.type", "a call's arguments are an object");
            target.arguments = compileSchema(p, at + ".parameters");
        }
        r.requiredCall.push_back(std::move(target));
    }
    if (r.requiredCall.empty())
        throw bad(namedField, "\"" + named + "\" is not among the declared " +
                                  (legacy ? "functions" : "tools"));
}

} // namespace detail

std::shared_ptr<const OutputConstraint> answerConstraint(const ChatRequest& request,
                                                         const Tokenizer& tokenizer) {
    if (!request.requiredCall.empty())
        return OutputConstraint::toolCall(request.requiredCall, tokenizer);
    if (request.answerGrammar)
        return OutputConstraint::jsonAnswer(*request.answerGrammar, tokenizer);
    return nullptr;
}

} // namespace k3::api
