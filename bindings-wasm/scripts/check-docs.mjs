// Every export of the package has a doc comment, and so does every member of an exported
// class or interface: what editors show on hover and the TypeDoc reference is made of.
//
//   node scripts/check-docs.mjs docs.json     (docs.json: `typedoc --json docs.json`)
//
// Two things are left to their context, on purpose: the fields of an inline object type are
// described by the documented property or alias that holds it (the AWS shapes), and the
// `free()` and `[Symbol.dispose]()` that wasm-bindgen generates on every class. Members a class
// inherits are documented where they are declared. Exits 1 and lists what is missing.
import { readFileSync } from "node:fs";

// TypeDoc's ReflectionKind values.
const Kind = {
  Variable: 32,
  Function: 64,
  Class: 128,
  Interface: 256,
  Property: 1024,
  Method: 2048,
  Accessor: 262144,
  TypeAlias: 2097152,
  Enum: 8,
  EnumMember: 16,
  TypeLiteral: 65536,
};
const required = new Set([
  Kind.Variable, Kind.Function, Kind.Class, Kind.Interface, Kind.Property, Kind.Method,
  Kind.Accessor, Kind.TypeAlias, Kind.Enum, Kind.EnumMember,
]);
const generated = new Set(["free", "[dispose]"]);

const hasText = (comment) => Boolean(comment?.summary?.some((part) => part.text.trim()));
function documented(reflection) {
  if (hasText(reflection.comment)) return true;
  const signatures = [
    ...(reflection.signatures ?? []),
    reflection.getSignature,
    reflection.setSignature,
  ].filter(Boolean);
  return signatures.some((signature) => hasText(signature.comment));
}

const missing = [];
let checked = 0;
function visit(reflection, path, parentKind) {
  const name = path ? `${path}.${reflection.name}` : reflection.name;
  const own = !reflection.inheritedFrom && !reflection.flags?.isExternal;
  if (required.has(reflection.kind) && own && parentKind !== Kind.TypeLiteral && !generated.has(reflection.name)) {
    checked += 1;
    if (!documented(reflection)) missing.push(name);
  }
  for (const child of reflection.children ?? []) visit(child, name, reflection.kind);
}

const project = JSON.parse(readFileSync(process.argv[2], "utf8"));
for (const child of project.children ?? []) visit(child, "", project.kind);
for (const name of missing) console.log(`not documented: ${name}`);
console.log(`npm package docs: ${checked} exports and members checked, ${missing.length} without a doc comment`);
process.exit(missing.length ? 1 : 0);
