// The official ACP TypeScript SDK (@agentclientprotocol/sdk, 1.x or 2.x) as the client of an
// agent under test, driven over this process's stdio by tests/support/ts_client.py.
//
//     node client.mjs '{"sdk": "/path/to/node_modules/@agentclientprotocol/sdk",
//                       "command": ["acp-bridge", "serve", ...], "cwd": "/tmp/x"}'
//
// It starts the agent and connects the SDK's client app (`client()`, `connectWith`) over the
// SDK's own framing (`ndJsonStream`). Plain JavaScript, no build step, nothing installed
// here: the SDK (and its zod) is imported from the folder `sdk` names.
//
// stdin: one JSON op a line from the test
//   {"op": "request", "tag", "method", "params", "cancelAtChunk"?, "closeTag"?}
//                                                    ctx.request(method, params), cancellable;
//                                                    a prompt cancelled by the client itself at
//                                                    its session's first agent_message_chunk,
//                                                    by "session/cancel", "$/cancel_request" or
//                                                    "session/close" (answered under closeTag)
//   {"op": "cancel", "tag"}                          abort it: the SDK sends `$/cancel_request`
//   {"op": "notify", "method", "params"}             ctx.notify(method, params)
//   {"op": "raw", "text", "id"?}                     a line written as it is, past the SDK; the
//                                                    answers to `id` are not handed to the SDK
//   {"op": "policy", "permissions"?, "elicitations"?} what the client answers next
//   {"op": "close"}                                  close the agent's stdin, wait for its exit
// stdout: one JSON event a line
//   {"ev": "ready", "sdk": version}
//   {"ev": "out" | "in", "text", "check"?}           every line to / from the agent; each line
//                                                    in is checked by the SDK's zod schemas
//   {"ev": "update", "params"} {"ev": "asked", "method", "params", "answer"}
//                                                    what the SDK delivered to the client's handlers
//   {"ev": "result", "tag", "result", "ms"} {"ev": "error", "tag", "error", "ms"}
//                                                    (ms: from sending the request to its answer)
//   {"ev": "exit", "code", "signal"}
//
// The zod check of a line: its params (a request or notification) or result (an answer to
// one of the client's requests, the method found from the lines out) against the schema of
// its method, the stable one for a stable method and the unstable one for the others
// (`session/fork`); `ok` is whether zod took it AND kept every value it knows: the SDK's
// schemas put a default in place of some malformed values rather than refuse them, so a
// value the parse changed is reported too (`changed`, its paths). Members the stable
// schema does not know (`PromptResponse.usage`) are checked by the unstable one; those
// neither knows are listed (`unknown`), not refused: they are newer than the SDK.

import { spawn } from "node:child_process";
import { readFileSync, writeFileSync, existsSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";

const config = JSON.parse(process.argv[2]);
const sdk = config.sdk;
const pkg = JSON.parse(readFileSync(join(sdk, "package.json"), "utf8"));
const major = Number.parseInt(pkg.version, 10);

// Where each major keeps what is used here (2.x split stable and unstable v1 apart; 1.x has
// one v1, unstable included).
const LAYOUTS = {
  2: {
    entry: "dist/v1/unstable/acp.js",
    zodStable: "dist/v1/schema/zod.gen.js",
    zodUnstable: "dist/v1/unstable/schema/zod.gen.js",
    schemaStable: "schema/v1/schema.json",
    schemaUnstable: "schema/v1/schema.unstable.json",
  },
  1: {
    entry: "dist/acp.js",
    zodStable: "dist/schema/zod.gen.js",
    zodUnstable: "dist/schema/zod.gen.js",
    schemaStable: "schema/schema.json",
    schemaUnstable: "schema/schema.json",
  },
};
const layout = LAYOUTS[Math.min(major, 2)];
if (!layout) throw new Error(`unsupported @agentclientprotocol/sdk ${pkg.version}`);
for (const file of Object.values(layout)) {
  if (!existsSync(join(sdk, file))) throw new Error(`${sdk} has no ${file} (sdk ${pkg.version})`);
}
const load = (file) => import(pathToFileURL(join(sdk, file)).href);
const acp = await load(layout.entry);
const zodStable = await load(layout.zodStable);
const zodUnstable = await load(layout.zodUnstable);

// method -> {params, result} definition names, from the x-method annotations of the SDK's
// own JSON schema.
function methodTable(file) {
  const table = new Map();
  for (const [name, def] of Object.entries(JSON.parse(readFileSync(join(sdk, file), "utf8")).$defs)) {
    const method = def["x-method"];
    if (!method) continue;
    const entry = table.get(method) ?? {};
    if (name.endsWith("Response")) entry.result = name;
    else if (name.endsWith("Request") || (name.endsWith("Notification") && !entry.params)) entry.params = name;
    table.set(method, entry);
  }
  return table;
}
const stableMethods = methodTable(layout.schemaStable);
const unstableMethods = methodTable(layout.schemaUnstable);

const emit = (event) => process.stdout.write(JSON.stringify(event) + "\n");

// What a schema's parse made of `input`: the paths it changed (a default in place of a
// malformed value, invalid items skipped) and those it dropped as unknown to it (a member
// newer than the SDK's schema); what it added (its defaults) is not counted.
function compare(input, output, path = "", out = { changed: [], unknown: [] }) {
  const here = path || "<root>";
  if (input === null || typeof input !== "object") {
    if (!Object.is(input, output)) out.changed.push(here);
  } else if (Array.isArray(input)) {
    if (!Array.isArray(output) || output.length !== input.length) out.changed.push(here);
    else input.forEach((item, i) => compare(item, output[i], `${path}[${i}]`, out));
  } else if (output === null || typeof output !== "object" || Array.isArray(output)) {
    out.changed.push(here);
  } else {
    for (const key of Object.keys(input)) {
      const at = path ? `${path}.${key}` : key;
      if (key in output) compare(input[key], output[key], at, out);
      else out.unknown.push(at);
    }
  }
  return out;
}

function zodCheck(def, value, stable) {
  const schema = (stable ? zodStable : zodUnstable)[`z${def}`];
  if (!schema) return { def, ok: false, issues: [`the sdk has no schema z${def}`] };
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    return { def, ok: false, issues: parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`) };
  }
  const { changed, unknown } = compare(value, parsed.data);
  return { def, ok: changed.length === 0, ...(changed.length ? { changed } : {}), ...(unknown.length ? { unknown } : {}) };
}

// `value` of `method` (its "params" or "result"): the stable schema for a stable method,
// and the unstable one for what the stable one does not know (or has no such method).
function check(method, slot, value) {
  const stable = stableMethods.get(method)?.[slot];
  if (stable) {
    const verdict = zodCheck(stable, value, true);
    if (!verdict.ok || !verdict.unknown) return { ...verdict, schema: "stable" };
    return { ...zodCheck(stable, value, false), schema: "unstable", stableUnknown: verdict.unknown };
  }
  const unstable = unstableMethods.get(method)?.[slot];
  if (!unstable) return { def: null, ok: false, issues: [`the sdk's schema has no ${slot} of ${method}`] };
  return { ...zodCheck(unstable, value, false), schema: "unstable" };
}

const sentMethods = new Map(); // JSON of an id the client used -> its method
const rawIds = new Set(); // JSON of ids of raw requests: their answers are not the SDK's

function checkIncoming(message) {
  if (message === null || typeof message !== "object" || Array.isArray(message)) return null;
  if (typeof message.method === "string") {
    if (message.method.startsWith("_")) return null;
    return check(message.method, "params", message.params ?? {});
  }
  const method = sentMethods.get(JSON.stringify(message.id));
  if (method === undefined || method.startsWith("_")) return null;
  if ("error" in message) return zodCheck("Error", message.error, true);
  return check(method, "result", message.result);
}

const agent = spawn(config.command[0], config.command.slice(1), {
  cwd: config.cwd, env: { ...process.env, ...(config.env ?? {}) }, stdio: ["pipe", "pipe", "inherit"],
});
const exited = new Promise((resolve) => agent.on("exit", (code, signal) => resolve({ code, signal })));
agent.stdin.on("error", () => {}); // an agent that exits first: its exit says so

// The agent's stdout, a line at a time, to the SDK's ndJsonStream.
let feed;
const fromAgent = new ReadableStream({ start(controller) { feed = controller; } });
let pendingBytes = Buffer.alloc(0);
agent.stdout.on("data", (chunk) => {
  pendingBytes = Buffer.concat([pendingBytes, chunk]);
  let newline;
  while ((newline = pendingBytes.indexOf(0x0a)) >= 0) {
    const line = pendingBytes.subarray(0, newline);
    pendingBytes = pendingBytes.subarray(newline + 1);
    const text = line.toString("utf8");
    let message;
    try { message = JSON.parse(text); } catch { message = undefined; }
    emit({ ev: "in", text, check: message === undefined ? null : checkIncoming(message) });
    const answersRaw = message && typeof message === "object" && !("method" in message)
      && rawIds.has(JSON.stringify(message.id));
    if (!answersRaw) feed.enqueue(new Uint8Array(Buffer.concat([line, Buffer.from("\n")])));
  }
});
agent.stdout.on("end", () => feed.close());

function noteOut(text) {
  try {
    const message = JSON.parse(text);
    if (message && typeof message.method === "string" && "id" in message) {
      sentMethods.set(JSON.stringify(message.id), message.method);
    }
  } catch { /* a raw line that is not JSON */ }
  emit({ ev: "out", text });
}

let outBytes = Buffer.alloc(0);
const toAgent = new WritableStream({
  write(chunk) {
    outBytes = Buffer.concat([outBytes, Buffer.from(chunk)]);
    let newline;
    while ((newline = outBytes.indexOf(0x0a)) >= 0) {
      noteOut(outBytes.subarray(0, newline).toString("utf8"));
      outBytes = outBytes.subarray(newline + 1);
    }
    return new Promise((resolve) => agent.stdin.write(chunk, () => resolve()));
  },
});

// What the client answers: permission option kinds ("allow_once", ..., or "cancelled") and
// elicitation answers, in order; without one left, "cancelled" and "decline".
const policy = { permissions: [], elicitations: [] };

function readText(path, line, limit) {
  const lines = readFileSync(path, "utf8").split(/(?<=\n)/);
  const start = Math.max((line ?? 1) - 1, 0);
  return lines.slice(start, limit == null ? undefined : start + limit).join("");
}

const app = acp.client({ name: "acp-bridge-tests" })
  .onRequest("session/request_permission", ({ params }) => {
    const kind = policy.permissions.shift() ?? "cancelled";
    const option = params.options.find((o) => o.kind === kind);
    const answer = option ? { outcome: { outcome: "selected", optionId: option.optionId } }
      : { outcome: { outcome: "cancelled" } };
    emit({ ev: "asked", method: "session/request_permission", params, answer });
    return answer;
  })
  .onRequest("fs/read_text_file", ({ params }) => {
    const answer = { content: readText(params.path, params.line, params.limit) };
    emit({ ev: "asked", method: "fs/read_text_file", params, answer });
    return answer;
  })
  .onRequest("fs/write_text_file", ({ params }) => {
    writeFileSync(params.path, params.content);
    emit({ ev: "asked", method: "fs/write_text_file", params, answer: {} });
    return {};
  })
  .onRequest("elicitation/create", ({ params }) => {
    const answer = policy.elicitations.shift() ?? { action: "decline" };
    emit({ ev: "asked", method: "elicitation/create", params, answer });
    return answer;
  })
  .onNotification("session/update", ({ params }) => {
    emit({ ev: "update", params });
    const arm = armed.get(params.sessionId);
    if (arm && params.update.sessionUpdate === "agent_message_chunk") {
      armed.delete(params.sessionId);
      cancelNow(arm, params.sessionId);
    }
  })
  .onNotification("elicitation/complete", ({ params }) => emit({ ev: "asked", method: "elicitation/complete", params }));

const running = new Map(); // tag -> AbortController of a request in flight
const armed = new Map(); // sessionId -> {way, tag, closeTag}: a prompt to cancel at its first chunk
let agentContext = null; // the ClientContext of the connection, once it is made

function send(tag, method, params) {
  const abort = new AbortController();
  running.set(tag, abort);
  const sent = performance.now();
  agentContext.request(method, params, { cancellationSignal: abort.signal }).then(
    (result) => emit({ ev: "result", tag, result: result ?? null, ms: performance.now() - sent }),
    (error) => emit({ ev: "error", tag, error: errorOf(error), ms: performance.now() - sent }),
  ).finally(() => running.delete(tag));
}

function cancelNow(arm, sessionId) {
  if (arm.way === "session/cancel") void agentContext.notify("session/cancel", { sessionId });
  else if (arm.way === "$/cancel_request") running.get(arm.tag)?.abort("cancelled by the client");
  else send(arm.closeTag, "session/close", { sessionId });
}

function errorOf(error) {
  if (error && typeof error.code === "number") {
    return { code: error.code, message: error.message, ...(error.data === undefined ? {} : { data: error.data }) };
  }
  return { code: null, message: String(error?.stack ?? error) };
}

async function serve(ctx) {
  agentContext = ctx;
  const ops = createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of ops) {
    if (!line.trim()) continue;
    const op = JSON.parse(line);
    if (op.op === "request") {
      if (op.cancelAtChunk) {
        armed.set(op.params.sessionId, { way: op.cancelAtChunk, tag: op.tag, closeTag: op.closeTag });
      }
      send(op.tag, op.method, op.params ?? {});
    } else if (op.op === "cancel") {
      running.get(op.tag)?.abort("cancelled by the test");
    } else if (op.op === "notify") {
      await ctx.notify(op.method, op.params ?? {});
    } else if (op.op === "raw") {
      if (op.id !== undefined) rawIds.add(JSON.stringify(op.id));
      noteOut(op.text);
      agent.stdin.write(op.text + "\n");
    } else if (op.op === "policy") {
      if (op.permissions) policy.permissions = [...op.permissions];
      if (op.elicitations) policy.elicitations = [...op.elicitations];
    } else if (op.op === "close") {
      break;
    }
  }
  closing = true;
  agent.stdin.end();
  await exited;
}

// The agent's stdout ends when it exits, which closes the SDK's connection (and rejects
// `connectWith`) while `serve` still waits for the exit: expected once the test closed it.
let closing = false;
emit({ ev: "ready", sdk: pkg.version });
try {
  await app.connectWith(acp.ndJsonStream(toAgent, fromAgent), serve);
} catch (error) {
  if (!closing) {
    emit({ ev: "fatal", message: String(error?.stack ?? error) });
    agent.kill("SIGKILL");
    process.exitCode = 1;
  }
}
emit({ ev: "exit", ...(await exited) });
process.exit();
