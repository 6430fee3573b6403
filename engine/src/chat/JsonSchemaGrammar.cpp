// A JSON schema (the subset k3/constraint.hpp lists) compiled to grammar nodes. Every
// refusal names the keyword's path from the schema's root.
#include "k3/constraint.hpp"
#include "k3/grammar.hpp"
#include "k3/json_limits.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>

namespace k3 {

SchemaError::SchemaError(std::string path, std::string reason)
    : Error(ErrorKind::Chat, (path.empty() ? std::string("the schema") : path) + ": " + reason),
      path_(std::move(path)), reason_(std::move(reason)) {}

namespace grammar {

namespace {
using Kind = Node::Kind;
using Json = nlohmann::ordered_json;

// More nodes than this is no schema a tool or an answer needs.
constexpr std::size_t kMaxNodes = 20000;
constexpr int kMaxSchemaDepth = 32;
constexpr std::int64_t kMaxCount = 100000; // minItems, maxItems, minLength, maxLength

const Node& literal(Grammar& g, std::string_view text) {
    Node& n = g.add(Kind::Literal);
    for (const char c : text) n.literal.push_back(Symbol(static_cast<unsigned char>(c)));
    return n;
}

} // namespace

const Node* addAnyValue(Grammar& g) {
    if (g.anyValue) return g.anyValue;
    Node& any = g.add(Kind::Alt);
    Node& object = g.add(Kind::Object);
    object.additional = &any;
    Node& array = g.add(Kind::Array);
    array.items = &any;
    any.children = {&object,
                    &array,
                    &g.add(Kind::String),
                    &g.add(Kind::Number),
                    &literal(g, "true"),
                    &literal(g, "false"),
                    &literal(g, "null")};
    g.anyValue = &any;
    return &any;
}

namespace {

int minSymbolsOf(Node& n);

int childMin(const Node* n) {
    return minSymbolsOf(const_cast<Node&>(*n));
}

int minSymbolsOf(Node& n) {
    if (n.minSymbols >= 0) return n.minSymbols;
    n.minSymbols = kUnbounded; // a cycle that needs an instance of itself never ends
    std::int64_t m = 0;
    switch (n.kind) {
    case Kind::Literal:
        m = n.tokensFrom.empty() ? std::int64_t(n.literal.size()) : n.tokensFrom[0];
        break;
    case Kind::Seq:
        for (const Node* c : n.children) m += childMin(c);
        break;
    case Kind::Alt:
        m = kUnbounded;
        for (const Node* c : n.children) m = std::min<std::int64_t>(m, childMin(c));
        break;
    case Kind::FreeText:
        m = 0;
        break;
    case Kind::Padded:
        m = childMin(n.children[0]);
        break;
    case Kind::Object: {
        int required = 0;
        for (std::size_t i = 0; i < n.keys.size(); ++i)
            childMin(n.keys[i]), childMin(n.children[i]);
        for (std::size_t i = 0; i < n.keys.size(); ++i)
            if (n.required & (1ull << i)) {
                m += n.keys[i]->minSymbols + 1 + n.children[i]->minSymbols;
                ++required;
            }
        m += 2 + std::max(0, required - 1);
        break;
    }
    case Kind::Array:
        m = 2 +
            (n.minItems > 0 ? std::int64_t(n.minItems) * childMin(n.items) + n.minItems - 1 : 0);
        break;
    case Kind::String:
        m = 2 + n.minLength;
        break;
    case Kind::Number:
    case Kind::Integer:
        m = 1;
        break;
    }
    n.minSymbols = int(std::min<std::int64_t>(m, kUnbounded));
    return n.minSymbols;
}

} // namespace

void computeMinSymbols(Grammar& g) {
    for (Node& n : g.nodes) minSymbolsOf(n);
}

namespace {

std::string join(const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
}

const std::set<std::string>& annotations() {
    static const std::set<std::string> a{"title",      "description", "default",  "examples",
                                         "$comment",   "$schema",     "$id",      "format",
                                         "deprecated", "readOnly",    "writeOnly"};
    return a;
}

// The types each keyword applies to.
const std::vector<std::pair<std::string, std::string>>& keywordTypes() {
    static const std::vector<std::pair<std::string, std::string>> k{
        {"properties", "object"}, {"required", "object"}, {"additionalProperties", "object"},
        {"items", "array"},       {"minItems", "array"},  {"maxItems", "array"},
        {"minLength", "string"},  {"maxLength", "string"}};
    return k;
}

class SchemaCompiler {
public:
    explicit SchemaCompiler(Grammar& g) : g_(g) {}

    const Node* compile(const Json& s, const std::string& path, int depth) {
        if (depth > kMaxSchemaDepth)
            throw SchemaError(path,
                              "nested deeper than " + std::to_string(kMaxSchemaDepth) + " schemas");
        if (g_.nodes.size() > kMaxNodes)
            throw SchemaError(path, "the schema is too large (over " + std::to_string(kMaxNodes) +
                                        " parts)");
        if (s.is_boolean()) {
            if (!s.get<bool>()) throw SchemaError(path, "false admits no value");
            return addAnyValue(g_);
        }
        if (!s.is_object()) throw SchemaError(path, "a schema must be an object or a boolean");
        checkKeywords(s, path);
        if (s.contains("enum") || s.contains("const")) return values(s, path, depth);
        if (s.contains("anyOf")) return anyOf(s, path, depth);
        return typed(s, path, depth);
    }

private:
    void checkKeywords(const Json& s, const std::string& path) {
        static const std::set<std::string> supported{
            "type",      "properties", "required", "additionalProperties",
            "items",     "minItems",   "maxItems", "minLength",
            "maxLength", "enum",       "const",    "anyOf"};
        for (const auto& [key, value] : s.items())
            if (!supported.count(key) && !annotations().count(key))
                throw SchemaError(join(path, key),
                                  "not supported (the subset: type, properties, required, "
                                  "additionalProperties, items, minItems, maxItems, minLength, "
                                  "maxLength, enum, const, anyOf)");
        if (s.contains("anyOf"))
            for (const auto& [key, value] : s.items())
                if (!annotations().count(key) && key != "anyOf" && key != "enum" && key != "const")
                    throw SchemaError(join(path, key),
                                      "not supported beside anyOf: give it inside each "
                                      "alternative");
    }

    std::vector<std::string> types(const Json& s, const std::string& path) {
        static const std::set<std::string> known{"object",  "array",   "string", "number",
                                                 "integer", "boolean", "null"};
        std::vector<std::string> out;
        const std::string field = join(path, "type");
        const auto add = [&](const Json& t, const std::string& where) {
            if (!t.is_string()) throw SchemaError(where, "a type name must be a string");
            const std::string name = t.get<std::string>();
            if (!known.count(name))
                throw SchemaError(where, "\"" + name +
                                             "\" is not object, array, string, number, integer, "
                                             "boolean or null");
            if (std::find(out.begin(), out.end(), name) != out.end())
                throw SchemaError(where, "\"" + name + "\" is listed twice");
            out.push_back(name);
        };
        if (s.contains("type")) {
            const Json& t = s["type"];
            if (t.is_array()) {
                if (t.empty()) throw SchemaError(field, "an empty list admits no value");
                for (std::size_t i = 0; i < t.size(); ++i)
                    add(t[i], field + "[" + std::to_string(i) + "]");
            } else {
                add(t, field);
            }
            return out;
        }
        // No type: the one the keywords given apply to, else any value.
        for (const auto& [keyword, type] : keywordTypes())
            if (s.contains(keyword) && std::find(out.begin(), out.end(), type) == out.end())
                out.push_back(type);
        return out;
    }

    const Node* typed(const Json& s, const std::string& path, int depth) {
        const std::vector<std::string> names = types(s, path);
        if (names.empty()) return addAnyValue(g_);
        for (const auto& [keyword, type] : keywordTypes())
            if (s.contains(keyword) && std::find(names.begin(), names.end(), type) == names.end())
                throw SchemaError(join(path, keyword),
                                  "applies to type " + type + ", which the schema's type excludes");
        std::vector<const Node*> alternatives;
        for (const std::string& type : names) alternatives.push_back(ofType(type, s, path, depth));
        if (alternatives.size() == 1) return alternatives[0];
        Node& alt = g_.add(Kind::Alt);
        alt.children = alternatives;
        return &alt;
    }

    const Node* ofType(const std::string& type, const Json& s, const std::string& path, int depth) {
        if (type == "object") return object(s, path, depth);
        if (type == "array") return array(s, path, depth);
        if (type == "string") {
            Node& n = g_.add(Kind::String);
            n.minLength = count(s, "minLength", path, 0);
            n.maxLength = count(s, "maxLength", path, kUnbounded);
            if (n.minLength > n.maxLength)
                throw SchemaError(join(path, "minLength"), "is above maxLength: no string fits");
            return &n;
        }
        if (type == "number") return &g_.add(Kind::Number);
        if (type == "integer") return &g_.add(Kind::Integer);
        if (type == "null") return &literal(g_, "null");
        Node& b = g_.add(Kind::Alt);
        b.children = {&literal(g_, "true"), &literal(g_, "false")};
        return &b;
    }

    int count(const Json& s, const char* key, const std::string& path, int absent) {
        if (!s.contains(key)) return absent;
        const Json& v = s[key];
        const bool integral =
            v.is_number_integer() ||
            (v.is_number_float() && v.get<double>() == double(std::int64_t(v.get<double>())));
        if (!integral || v.get<double>() < 0 || v.get<double>() > double(kMaxCount))
            throw SchemaError(join(path, key),
                              "a whole number 0.." + std::to_string(kMaxCount) + " expected");
        return int(v.get<double>());
    }

    const Node* object(const Json& s, const std::string& path, int depth) {
        Node& n = g_.add(Kind::Object);
        const std::string propertiesPath = join(path, "properties");
        std::vector<std::string> names;
        if (s.contains("properties")) {
            const Json& p = s["properties"];
            if (!p.is_object()) throw SchemaError(propertiesPath, "an object of schemas expected");
            if (p.size() > 64)
                throw SchemaError(propertiesPath, "more than 64 properties are not supported");
            for (const auto& [name, schema] : p.items()) {
                names.push_back(name);
                n.keys.push_back(&literal(g_, key(name, join(propertiesPath, name))));
                n.children.push_back(compile(schema, join(propertiesPath, name), depth + 1));
            }
        }
        const Node* additional = addAnyValue(g_);
        bool additionalAllowed = true;
        if (s.contains("additionalProperties")) {
            const Json& a = s["additionalProperties"];
            if (a.is_boolean())
                additionalAllowed = a.get<bool>();
            else
                additional = compile(a, join(path, "additionalProperties"), depth + 1);
        }
        if (s.contains("required"))
            required(s["required"], join(path, "required"), names, additionalAllowed, additional,
                     n);
        // Keys outside properties are generated only when there are no properties.
        if (n.keys.empty() && additionalAllowed) n.additional = additional;
        return &n;
    }

    void required(const Json& r, const std::string& path, std::vector<std::string>& names,
                  bool additionalAllowed, const Node* additional, Node& n) {
        if (!r.is_array()) throw SchemaError(path, "an array of property names expected");
        for (std::size_t i = 0; i < r.size(); ++i) {
            const std::string where = path + "[" + std::to_string(i) + "]";
            if (!r[i].is_string()) throw SchemaError(where, "a property name must be a string");
            const std::string name = r[i].get<std::string>();
            auto it = std::find(names.begin(), names.end(), name);
            if (it == names.end()) {
                if (!additionalAllowed)
                    throw SchemaError(where, "\"" + name +
                                                 "\" is not in properties and "
                                                 "additionalProperties is false");
                if (names.size() >= 64)
                    throw SchemaError(where, "more than 64 properties are not supported");
                names.push_back(name);
                n.keys.push_back(&literal(g_, key(name, where)));
                n.children.push_back(additional);
                it = names.end() - 1;
            }
            const std::uint64_t bit = 1ull << (it - names.begin());
            if (n.required & bit) throw SchemaError(where, "\"" + name + "\" is listed twice");
            n.required |= bit;
        }
    }

    std::string key(const std::string& name, const std::string& path) {
        try {
            return Json(name).dump();
        } catch (const Json::exception&) {
            throw SchemaError(path, "the name is not valid UTF-8");
        }
    }

    const Node* array(const Json& s, const std::string& path, int depth) {
        Node& n = g_.add(Kind::Array);
        if (s.contains("items")) {
            if (s["items"].is_array())
                throw SchemaError(join(path, "items"),
                                  "a list of schemas (a tuple) is not supported: give one schema");
            n.items = compile(s["items"], join(path, "items"), depth + 1);
        } else {
            n.items = addAnyValue(g_);
        }
        n.minItems = count(s, "minItems", path, 0);
        n.maxItems = count(s, "maxItems", path, kUnbounded);
        if (n.minItems > n.maxItems)
            throw SchemaError(join(path, "minItems"), "is above maxItems: no array fits");
        return &n;
    }

    const Node* anyOf(const Json& s, const std::string& path, int depth) {
        const std::string field = join(path, "anyOf");
        const Json& a = s["anyOf"];
        if (!a.is_array() || a.empty())
            throw SchemaError(field, "a non-empty array of schemas expected");
        Node& alt = g_.add(Kind::Alt);
        for (std::size_t i = 0; i < a.size(); ++i)
            alt.children.push_back(compile(a[i], field + "[" + std::to_string(i) + "]", depth + 1));
        return &alt;
    }

    // enum / const: each value written compactly, kept when the rest of the schema
    // admits it.
    const Node* values(const Json& s, const std::string& path, int depth) {
        if (s.contains("enum") && s.contains("const"))
            throw SchemaError(join(path, "const"), "give enum or const, not both");
        const bool isConst = s.contains("const");
        const std::string field = join(path, isConst ? "const" : "enum");
        Json list = isConst ? Json::array({s["const"]}) : s["enum"];
        if (!list.is_array() || list.empty())
            throw SchemaError(field, "a non-empty array of values expected");
        Json rest = s;
        rest.erase("enum");
        rest.erase("const");
        Grammar check;
        check.root = SchemaCompiler(check).compile(rest, path, depth);
        computeMinSymbols(check);
        Node& alt = g_.add(Kind::Alt);
        for (std::size_t i = 0; i < list.size(); ++i) {
            std::string text;
            try {
                text = list[i].dump();
            } catch (const Json::exception&) {
                throw SchemaError(isConst ? field : field + "[" + std::to_string(i) + "]",
                                  "not valid UTF-8");
            }
            if (matches(check, text)) alt.children.push_back(&literal(g_, text));
        }
        if (alt.children.empty())
            throw SchemaError(field, "no value satisfies the rest of the schema");
        return &alt;
    }

    Grammar& g_;
};

std::shared_ptr<Grammar> compileSchema(const Json& schema) {
    auto g = std::make_shared<Grammar>();
    g->root = SchemaCompiler(*g).compile(schema, "", 0);
    computeMinSymbols(*g);
    return g;
}

} // namespace
} // namespace grammar

JsonGrammar JsonGrammar::anyObject() {
    return fromSchema(R"({"type":"object"})");
}

JsonGrammar JsonGrammar::anyValue() {
    return fromSchema("{}");
}

JsonGrammar JsonGrammar::fromSchema(std::string_view schemaJson) {
    if (const auto problem = jsonDepthProblem(schemaJson)) throw SchemaError("", *problem);
    grammar::Json doc;
    try {
        doc = grammar::Json::parse(schemaJson);
    } catch (const grammar::Json::exception& e) {
        throw SchemaError("", std::string("not valid JSON: ") + e.what());
    }
    return JsonGrammar(grammar::compileSchema(doc));
}

} // namespace k3
