/**
 * The benchmarks' HTTP/1.1 load client. Keep-alive connections, one request in flight on each
 * (no pipelining); a request is written as prebuilt bytes (head and body, corked), and a response
 * is read into one buffer per connection that every read reuses (`net`'s `onread`), its body
 * counted and dropped. Like perf_analyzer's C++ client it allocates nothing per response chunk:
 * `node:http`'s client allocates a Buffer per chunk read (a 16 MiB response is 256 of them), and
 * the full collections that much fresh external memory drives the load process into took as much
 * CPU per 16 MiB round trip as the server's own work, on the cores the server shares with it.
 *
 * What it checks: the status line, `Content-Length` (required: Nereid and the bare baseline
 * servers send it; a chunked response is an error), `Connection: close` (the connection is not
 * reused). A status other than 200 rejects with the status and the start of the body.
 */
import { connect, type Socket } from 'node:net';

/** Bytes of each connection's read buffer. */
const READ_BUFFER_BYTES = 256 * 1024;
/** Body bytes of a failed response kept for the error message. */
const ERROR_BODY_BYTES = 1024;

interface Exchange {
  resolve(length: number): void;
  reject(error: Error): void;
  /** Response head text read so far (undefined once the head is complete). */
  head: string | undefined;
  status: number;
  remaining: number;
  length: number;
  close: boolean;
  errorBody: string;
}

class Connection {
  readonly #socket: Socket;
  readonly #connected: Promise<void>;
  #exchange: Exchange | undefined;
  #broken: Error | undefined;

  constructor(port: number, host: string) {
    this.#socket = connect({
      port,
      host,
      onread: { buffer: Buffer.allocUnsafe(READ_BUFFER_BYTES), callback: (n, buffer) => this.#onRead(buffer as Buffer, n) },
    });
    this.#socket.setNoDelay(true);
    this.#connected = new Promise<void>((resolve, reject) => {
      this.#socket.once('connect', resolve);
      this.#socket.once('error', reject);
    });
    this.#socket.on('error', (err) => this.#fail(err));
    this.#socket.on('close', () => this.#fail(new Error('the server closed the connection')));
  }

  /** Whether the connection can take another request. */
  get usable(): boolean {
    return this.#broken === undefined;
  }

  async send(request: readonly Buffer[]): Promise<number> {
    await this.#connected;
    if (this.#broken !== undefined) throw this.#broken;
    return new Promise<number>((resolve, reject) => {
      this.#exchange = { resolve, reject, head: '', status: 0, remaining: 0, length: 0, close: false, errorBody: '' };
      this.#socket.cork();
      for (const part of request) this.#socket.write(part);
      this.#socket.uncork();
    });
  }

  close(): void {
    this.#broken ??= new Error('the client was closed');
    this.#socket.destroy();
  }

  #fail(err: Error): void {
    this.#broken ??= err;
    const exchange = this.#exchange;
    this.#exchange = undefined;
    exchange?.reject(err);
  }

  #onRead(buffer: Buffer, n: number): boolean {
    const x = this.#exchange;
    if (x === undefined) {
      this.#fail(new Error(`${n} bytes arrived with no request in flight`));
      this.#socket.destroy();
      return false;
    }
    let offset = 0;
    if (x.head !== undefined) {
      const before = x.head.length;
      x.head += buffer.toString('latin1', 0, n);
      const end = x.head.indexOf('\r\n\r\n');
      if (end < 0) return true;
      offset = end + 4 - before;
      const error = this.#parseHead(x, x.head.slice(0, end));
      x.head = undefined;
      if (error !== undefined) {
        this.#fail(error);
        this.#socket.destroy();
        return false;
      }
    }
    const take = Math.min(n - offset, x.remaining);
    if (x.status !== 200 && x.errorBody.length < ERROR_BODY_BYTES) x.errorBody += buffer.toString('utf8', offset, offset + Math.min(take, ERROR_BODY_BYTES));
    x.remaining -= take;
    if (offset + take < n) {
      this.#fail(new Error(`${n - offset - take} bytes arrived after the response's Content-Length`));
      this.#socket.destroy();
      return false;
    }
    if (x.remaining > 0) return true;
    this.#exchange = undefined;
    if (x.close) {
      this.#broken = new Error('the server asked to close the connection');
      this.#socket.destroy();
    }
    if (x.status === 200) x.resolve(x.length);
    else x.reject(new Error(`HTTP ${x.status}: ${x.errorBody}`));
    return true;
  }

  #parseHead(x: Exchange, head: string): Error | undefined {
    const lines = head.split('\r\n');
    const status = /^HTTP\/1\.[01] (\d{3})/.exec(lines[0]!);
    if (status === null) return new Error(`not an HTTP/1.1 status line: '${lines[0]!.slice(0, 80)}'`);
    x.status = Number(status[1]);
    let length: number | undefined;
    for (let i = 1; i < lines.length; i++) {
      const line = lines[i]!;
      const colon = line.indexOf(':');
      const name = line.slice(0, colon).trim().toLowerCase();
      const value = line.slice(colon + 1).trim();
      if (name === 'content-length') length = Number(value);
      else if (name === 'transfer-encoding' && value.toLowerCase() !== 'identity') return new Error(`unsupported Transfer-Encoding '${value}'`);
      else if (name === 'connection' && value.toLowerCase() === 'close') x.close = true;
    }
    if (length === undefined || !Number.isSafeInteger(length) || length < 0) return new Error('the response has no valid Content-Length');
    x.remaining = length;
    x.length = length;
    return undefined;
  }
}

/**
 * POSTs `body` to `path` on up to `concurrency` keep-alive connections; `post` resolves with the
 * response body's length once a 200 response has been read whole, and rejects otherwise.
 */
export function leanHttpPoster(port: number, path: string, body: Buffer, headers: Record<string, string | number>, concurrency: number) {
  let head = `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nConnection: keep-alive\r\nContent-Length: ${body.byteLength}\r\n`;
  for (const [name, value] of Object.entries(headers)) head += `${name}: ${value}\r\n`;
  const request = [Buffer.from(`${head}\r\n`, 'latin1'), body];
  const idle: Connection[] = [];
  const all = new Set<Connection>();
  const waiting: ((c: Connection) => void)[] = [];
  let closed = false;

  const acquire = (): Promise<Connection> | Connection => {
    while (idle.length > 0) {
      const c = idle.pop()!;
      if (c.usable) return c;
      all.delete(c);
    }
    if (all.size < concurrency) {
      const c = new Connection(port, '127.0.0.1');
      all.add(c);
      return c;
    }
    return new Promise<Connection>((resolve) => waiting.push(resolve));
  };
  const release = (c: Connection): void => {
    if (!c.usable || closed) {
      all.delete(c);
      c.close();
      // A waiter gets a fresh connection in place of the broken one.
      if (!closed && waiting.length > 0) {
        const fresh = new Connection(port, '127.0.0.1');
        all.add(fresh);
        waiting.shift()!(fresh);
      }
      return;
    }
    const waiter = waiting.shift();
    if (waiter !== undefined) waiter(c);
    else idle.push(c);
  };
  const post = async (): Promise<number> => {
    if (closed) throw new Error('the poster is closed');
    const c = await acquire();
    try {
      return await c.send(request);
    } finally {
      release(c);
    }
  };
  const close = (): void => {
    closed = true;
    for (const c of all) c.close();
    all.clear();
    idle.length = 0;
  };
  return { post, close };
}
