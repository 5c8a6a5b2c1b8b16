// A minimal app built with Vite from the packed tarball: `npm install hotprefix-x.y.z.tgz` with the
// official `openai` client and Vercel's `ai` (pinned in the root package.json), `vite build`. The
// package test drives the API through `window.hotprefix`, and the clients through `window.clients`.
import * as hotprefix from 'hotprefix';
import { createFetch } from 'hotprefix/openai';
import { hotprefix as aiModel } from 'hotprefix/ai-sdk';
import OpenAI, { APIError, APIUserAbortError, BadRequestError, InternalServerError } from 'openai';
import { generateText, streamText, Output, jsonSchema, tool } from 'ai';

window.hotprefix = hotprefix;
window.clients = {
  createFetch, aiModel, OpenAI, APIError, APIUserAbortError, BadRequestError, InternalServerError, generateText, streamText, Output, jsonSchema, tool,
};
document.getElementById('status').textContent = 'ready';
