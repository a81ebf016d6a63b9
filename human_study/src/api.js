/*
 * Talking to the collection server. Answers go into a queue that is sent in order, one request at a
 * time, retried with backoff on network errors and 5xx replies (never on 4xx, which mean the answer
 * itself is wrong), so a flaky connection delays but never loses or duplicates an answer: the server
 * treats a re-sent identical answer as a no-op.
 */
var StudyApi = (function () {
  "use strict";

  class ApiError extends Error {
    constructor(status, detail) {
      super(detail);
      this.status = status;
    }
  }

  async function request(method, path, body) {
    let reply;
    try {
      reply = await fetch(path, {
        method,
        headers: body === undefined ? {} : { "Content-Type": "application/json" },
        body: body === undefined ? undefined : JSON.stringify(body),
        cache: "no-store",
      });
    } catch (error) {
      throw new ApiError(0, "network error");
    }
    let payload = null;
    try {
      payload = await reply.json();
    } catch (error) {
      payload = null;
    }
    if (!reply.ok) {
      const detail = payload && typeof payload.detail === "string" ? payload.detail : `server replied ${reply.status}`;
      throw new ApiError(reply.status, detail);
    }
    return payload;
  }

  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  /** Retry transient failures (network, 5xx) forever with capped backoff; rethrow 4xx at once. */
  async function persistent(method, path, body, onTrouble) {
    for (let attempt = 0; ; attempt++) {
      try {
        const result = await request(method, path, body);
        onTrouble(false);
        return result;
      } catch (error) {
        if (error.status >= 400 && error.status < 500) throw error;
        if (attempt >= 1) onTrouble(true);
        await sleep(Math.min(500 * 2 ** attempt, 8000));
      }
    }
  }

  class AnswerQueue {
    constructor(token, onTrouble, onRejected) {
      this.token = token;
      this.onTrouble = onTrouble;
      this.onRejected = onRejected;
      this.pending = [];
      this.running = null;
    }

    push(answer) {
      this.pending.push(answer);
      if (!this.running) this.running = this.flush();
    }

    async flush() {
      while (this.pending.length) {
        const answer = this.pending[0];
        try {
          await persistent("POST", `api/sessions/${this.token}/responses`, answer, this.onTrouble);
        } catch (error) {
          this.onRejected(answer, error);
        }
        this.pending.shift();
      }
      this.running = null;
    }

    /** Resolves once every queued answer has been acknowledged (or rejected) by the server. */
    async drained() {
      while (this.running) await this.running;
    }
  }

  return { ApiError, request, persistent, AnswerQueue };
})();
