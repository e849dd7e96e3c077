// A local HTTP server for the tests that need answers a real stack does not give on demand (503s, closed streams).
import { createServer } from "node:http";
import { after } from "node:test";

/**
 * Starts a server on 127.0.0.1 whose `handle(request, body, response)` answers each request; `requests` records
 * method, url, headers, body and the time each arrived (performance.now()). Call `close()` when done.
 */
export async function startStub(handle) {
  const requests = [];
  const sockets = new Set();
  const server = createServer((request, response) => {
    const chunks = [];
    request.on("data", (chunk) => chunks.push(chunk));
    request.on("end", () => {
      const body = Buffer.concat(chunks).toString("utf8");
      const record = { method: request.method, url: request.url, headers: request.headers, body, at: performance.now() };
      requests.push(record);
      handle(record, response, request);
    });
  });
  server.on("connection", (socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () =>
      new Promise((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

export function json(response, status, body, headers = {}) {
  response.writeHead(status, { "content-type": "application/json", ...headers });
  response.end(JSON.stringify(body));
}

export function errorBody(code, message, field = null) {
  return { error: { code, message, field } };
}

/** A stub answering the listed `[status, body, headers]` in turn (the last one again after that), closed after the test file. */
export async function scripted(answers) {
  let n = 0;
  const stub = await startStub((_, response) => {
    const [status, body, headers] = answers[Math.min(n, answers.length - 1)];
    n += 1;
    json(response, status, body, headers);
  });
  after(stub.close);
  return stub;
}
