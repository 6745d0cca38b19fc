// Drives a running kvca proxy with the official `openai` npm package, as an
// operator's Node.js clients would. scripts/sdk-node.sh starts the mock
// engines and kvca and passes their addresses:
//
//   KVCA_BASE_URL    kvca's public /v1 URL, in front of engines e0 and e1
//                    (models "mock" and "mock-<name>")
//   KVCA_BROKEN_URL  a second kvca's /v1 URL, in front of one engine that
//                    cuts every stream after a few events
//   KVCA_ADMIN_URL   the first kvca's admin listener (/admin/state, /metrics)
//
// Which engine answered is read from the response id: the mock prefixes its
// ids with its name ("chatcmpl-e0-17"). Run with `node --test test.mjs`;
// any failure exits non-zero.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const baseURL = process.env.KVCA_BASE_URL;
const brokenURL = process.env.KVCA_BROKEN_URL;
const adminURL = process.env.KVCA_ADMIN_URL;
if (!baseURL || !brokenURL || !adminURL) {
  console.error('KVCA_BASE_URL, KVCA_BROKEN_URL and KVCA_ADMIN_URL must be set (run scripts/sdk-node.sh)');
  process.exit(2);
}

// No SDK retries: a retry would hide which answer kvca gave. A timeout
// bounds every call so a hung proxy fails the run instead of stalling CI.
const client = new OpenAI({ baseURL, apiKey: 'sk-kvca-test', maxRetries: 0, timeout: 30_000 });

const MAX_TOKENS = 8;
// The mock answers MAX_TOKENS words of 4 bytes each (bench/mock/respond.go).
const CONTENT_LEN = MAX_TOKENS * 4;

// Long enough to span several kvca blocks and several mock cache blocks,
// so that a follow-up has whole cached blocks to report. Each test adds
// its own question, so tests never share a conversation prefix.
const SYSTEM = 'You are a careful assistant for the kvca Node SDK tests. '.repeat(12);

function engineOf(id) {
  const m = /^(?:chatcmpl|cmpl)-([^-]+)-\d+$/.exec(id);
  assert.ok(m, `unexpected response id ${id}`);
  return m[1];
}

function checkUsage(usage) {
  assert.ok(usage, 'usage missing');
  assert.equal(usage.completion_tokens, MAX_TOKENS);
  assert.ok(usage.prompt_tokens > 0);
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
  assert.equal(typeof usage.prompt_tokens_details?.cached_tokens, 'number');
}

function checkAnswer(c) {
  assert.equal(c.object, 'chat.completion');
  assert.equal(c.model, 'mock');
  assert.equal(c.choices.length, 1);
  const ch = c.choices[0];
  assert.equal(ch.message.role, 'assistant');
  assert.equal(ch.message.content.length, CONTENT_LEN);
  assert.equal(ch.finish_reason, 'length');
  assert.ok(!ch.message.tool_calls?.length, 'unexpected tool calls');
  checkUsage(c.usage);
}

const chat = (messages, extra = {}) =>
  client.chat.completions.create({ model: 'mock', messages, max_completion_tokens: MAX_TOKENS, ...extra });

test('models: the union of the engines, each once', async () => {
  const ids = [];
  for await (const m of client.models.list()) {
    assert.equal(m.object, 'model');
    ids.push(m.id);
  }
  assert.deepEqual(ids.sort(), ['mock', 'mock-e0', 'mock-e1']);
});

test('chat: a follow-up goes to the engine holding the first turn and hits its cache', async () => {
  const messages = [
    { role: 'system', content: SYSTEM },
    { role: 'user', content: 'What does a KV cache hold?' },
  ];
  const first = await chat(messages);
  checkAnswer(first);
  assert.equal(first.usage.prompt_tokens_details.cached_tokens, 0, 'fresh prefix reported cached');

  messages.push(first.choices[0].message, { role: 'user', content: 'And why route by prefix?' });
  const second = await chat(messages);
  checkAnswer(second);
  assert.equal(engineOf(second.id), engineOf(first.id), 'follow-up changed engine');
  const { cached_tokens } = second.usage.prompt_tokens_details;
  assert.ok(cached_tokens > 0 && cached_tokens < second.usage.prompt_tokens, `cached_tokens ${cached_tokens}`);
});

test('chat streaming: chunks accumulate into the whole answer, usage last', async () => {
  const messages = [
    { role: 'system', content: SYSTEM },
    { role: 'user', content: 'Stream me an answer.' },
  ];
  // Raw chunks first: one role announcement, one per token, one usage. A
  // question of its own, so the accumulated turn below is the only holder
  // of its prefix and its follow-up has one engine to go to.
  const rawMessages = [messages[0], { role: 'user', content: 'Stream me a raw answer.' }];
  const raw = await chat(rawMessages, { stream: true, stream_options: { include_usage: true } });
  let chunks = 0;
  let text = '';
  let usage;
  let finish;
  for await (const chunk of raw) {
    chunks++;
    for (const ch of chunk.choices) {
      text += ch.delta?.content ?? '';
      finish = ch.finish_reason ?? finish;
    }
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(chunks, MAX_TOKENS + 2);
  assert.equal(text.length, CONTENT_LEN);
  assert.equal(finish, 'length');
  checkUsage(usage);

  // The SDK's own accumulation (ChatCompletionStream).
  let deltas = '';
  const stream = client.chat.completions.stream({
    model: 'mock',
    messages,
    max_completion_tokens: MAX_TOKENS,
    stream_options: { include_usage: true },
  });
  stream.on('content', (delta) => {
    deltas += delta;
  });
  const final = await stream.finalChatCompletion();
  checkAnswer(final);
  assert.equal(final.choices[0].message.content, text, 'accumulated answer differs from the raw chunks');
  assert.equal(deltas, text);

  // The accumulated message as history: a follow-up on the same engine.
  messages.push(final.choices[0].message, { role: 'user', content: 'Go on.' });
  const next = await chat(messages);
  checkAnswer(next);
  assert.equal(engineOf(next.id), engineOf(final.id), 'follow-up of a streamed turn changed engine');
  assert.ok(next.usage.prompt_tokens_details.cached_tokens > 0);
});

// checked sums kvca's cache checks over its backends (/admin/state): the
// answers that reported cached tokens, and the tokens they reported.
async function checked() {
  const state = await (await fetch(`${adminURL}/admin/state`)).json();
  let checks = 0;
  let tokens = 0;
  for (const b of state.backends) {
    checks += b.cache_check.checks;
    tokens += b.cache_check.engine_cached_tokens;
  }
  return { checks, tokens };
}

test('chat streaming without stream_options: no usage chunk, and kvca checks the engine count', async () => {
  // The SDK's default: no stream_options. kvca asks the engine for usage
  // (--stream-usage) and removes the usage chunk, so the client sees what
  // the engine sends when not asked; kvca reads the cached tokens first.
  const before = await checked();
  const messages = [
    { role: 'system', content: SYSTEM },
    { role: 'user', content: 'Stream me a plain answer.' },
  ];
  const plain = async () => {
    const stream = await chat(messages, { stream: true });
    let chunks = 0;
    let text = '';
    let id;
    for await (const chunk of stream) {
      chunks++;
      id = chunk.id;
      assert.equal(chunk.usage ?? null, null, 'a usage chunk the client did not ask for');
      assert.equal(chunk.choices.length, 1, 'a chunk without choices');
      text += chunk.choices[0].delta?.content ?? '';
    }
    assert.equal(chunks, MAX_TOKENS + 1); // the role, then one per token
    assert.equal(text.length, CONTENT_LEN);
    return { id, text };
  };
  const first = await plain();
  messages.push({ role: 'assistant', content: first.text }, { role: 'user', content: 'And then?' });
  const second = await plain();
  assert.equal(engineOf(second.id), engineOf(first.id), 'follow-up changed engine');

  // The answers are booked after their last byte: wait a bounded time.
  let after;
  for (let i = 0; i < 50; i++) {
    after = await checked();
    if (after.checks >= before.checks + 2) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.equal(after.checks, before.checks + 2, 'the plain streams were not checked');
  assert.ok(after.tokens > before.tokens, 'the follow-up reported no cached tokens to kvca');
});

test('conversations at once under one user: every follow-up stays on its engine', async () => {
  // Twelve conversations in parallel, four turns each, all naming the
  // same end user, the later turns streamed as the SDK does by default:
  // far below any engine's capacity, no follow-up leaves the engine that
  // holds its history, and one user binds none of them.
  const homes = await Promise.all(Array.from({ length: 12 }, async (_, k) => {
    const messages = [
      { role: 'system', content: SYSTEM },
      // A question of a few hundred bytes, as users write them: a part of
      // a first turn shorter than one block is not learned (only whole
      // blocks are), and its follow-up would know only the shared prompt.
      { role: 'user', content: `Parallel conversation ${k}: ${'tell me, with an example from a production fleet, what a KV cache holds and why routing by prefix keeps it warm. '.repeat(3)}` },
    ];
    const first = await chat(messages, { user: 'tenant-a' });
    checkAnswer(first);
    const home = engineOf(first.id);
    messages.push(first.choices[0].message);
    for (let turn = 1; turn < 4; turn++) {
      messages.push({ role: 'user', content: `Conversation ${k}, turn ${turn}: and another?` });
      // kvca's X-Kvca-Route header (--route-header) says why it chose the
      // engine: a failure prints it.
      const { data: stream, response } = await chat(messages, { user: 'tenant-a', stream: true }).withResponse();
      let id = '';
      let content = '';
      for await (const chunk of stream) {
        id = chunk.id;
        assert.equal(chunk.usage ?? undefined, undefined, 'a usage chunk the client did not ask for');
        content += chunk.choices[0]?.delta?.content ?? '';
      }
      assert.equal(content.length, CONTENT_LEN);
      assert.equal(engineOf(id), home,
        `conversation ${k} turn ${turn} left its engine (${response.headers.get('x-kvca-route')})`);
      messages.push({ role: 'assistant', content });
    }
    return home;
  }));
  assert.ok(new Set(homes).size > 1, `twelve conversations of one user all on ${homes[0]}`);
});

test('tools: a tool-call conversation round-trips and stays on its engine', async () => {
  // The mock never emits tool calls (it answers fixed words), so the
  // assistant tool call below is the one a model would have produced.
  const tools = [
    {
      type: 'function',
      function: {
        name: 'get_weather',
        description: 'Current weather for a city',
        parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
      },
    },
  ];
  const messages = [
    { role: 'system', content: SYSTEM },
    { role: 'user', content: 'What is the weather in Lyon?' },
  ];
  const first = await chat(messages, { tools, tool_choice: 'auto' });
  checkAnswer(first);

  messages.push(
    {
      role: 'assistant',
      content: null,
      tool_calls: [{ id: 'call_lyon_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Lyon"}' } }],
    },
    { role: 'tool', tool_call_id: 'call_lyon_1', content: '{"temperature_c":21,"sky":"clear"}' },
  );
  const second = await chat(messages, { tools, tool_choice: 'auto' });
  checkAnswer(second);
  assert.equal(engineOf(second.id), engineOf(first.id), 'tool result changed engine');
  assert.ok(second.usage.prompt_tokens_details.cached_tokens > 0);
});

test('completions: non-streaming, then the same prompt streamed on the engine that holds it', async () => {
  const prompt = `${SYSTEM}\nComplete this sentence: a KV-cache-aware proxy`;
  const c = await client.completions.create({ model: 'mock', prompt, max_tokens: MAX_TOKENS });
  assert.equal(c.object, 'text_completion');
  assert.equal(c.choices.length, 1);
  assert.equal(c.choices[0].text.length, CONTENT_LEN);
  assert.equal(c.choices[0].finish_reason, 'length');
  checkUsage(c.usage);

  const stream = await client.completions.create({
    model: 'mock',
    prompt,
    max_tokens: MAX_TOKENS,
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let finish;
  let usage;
  let id;
  for await (const chunk of stream) {
    id = chunk.id;
    for (const ch of chunk.choices) {
      text += ch.text;
      finish = ch.finish_reason ?? finish;
    }
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(text, c.choices[0].text);
  assert.equal(finish, 'length');
  checkUsage(usage);
  // Completions are routed by prefix: the repeat finds its engine.
  assert.equal(engineOf(id), engineOf(c.id));
  assert.ok(usage.prompt_tokens_details.cached_tokens > 0);
});

test('errors: kvca answers reach the SDK as typed API errors', async () => {
  await assert.rejects(client.chat.completions.create({ model: 'mock', messages: [] }), (err) => {
    assert.ok(err instanceof OpenAI.BadRequestError, `${err}`);
    assert.equal(err.status, 400);
    assert.equal(err.type, 'invalid_request_error');
    assert.ok(err.code);
    return true;
  });
  await assert.rejects(client.completions.create({ model: 'mock' }), OpenAI.BadRequestError);
  // A rejected streaming request fails before any event.
  await assert.rejects(client.chat.completions.create({ model: 'mock', messages: [], stream: true }), OpenAI.BadRequestError);
  // kvca learns the engines' models asynchronously at start; until then an
  // engine answers the 404 itself (vLLM-style, numeric code), so wait a
  // bounded time for kvca's own answer.
  let notFound;
  for (let i = 0; i < 50; i++) {
    notFound = await chat([{ role: 'user', content: 'hi' }], { model: 'no-such-model' }).then(
      () => assert.fail('unknown model accepted'),
      (err) => err,
    );
    if (notFound.code === 'model_not_found') break;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.ok(notFound instanceof OpenAI.NotFoundError, `${notFound}`);
  assert.equal(notFound.status, 404);
  assert.equal(notFound.code, 'model_not_found');
  assert.equal(notFound.type, 'invalid_request_error');
});

test('a stream broken by the engine is an error, not a short answer', async () => {
  const broken = new OpenAI({ baseURL: brokenURL, apiKey: 'sk-kvca-test', maxRetries: 0, timeout: 30_000 });
  const stream = await broken.chat.completions.create({
    model: 'mock',
    messages: [{ role: 'user', content: 'This stream will break.' }],
    max_completion_tokens: MAX_TOKENS,
    stream: true,
  });
  let chunks = 0;
  await assert.rejects(
    (async () => {
      for await (const chunk of stream) {
        chunks++;
        assert.equal(chunk.choices[0]?.finish_reason ?? null, null, 'a broken stream must not finish');
      }
    })(),
    (err) => {
      assert.ok(err instanceof OpenAI.APIError, `${err}`);
      return true;
    },
  );
  assert.ok(chunks > 0 && chunks < MAX_TOKENS + 1, `${chunks} chunks before the break`);
});
