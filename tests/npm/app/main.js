// A minimal app built with Vite from the packed tarball: `npm install hotprefix-x.y.z.tgz`,
// `vite build`. The package test drives the API through `window.hotprefix`.
import * as hotprefix from 'hotprefix';

window.hotprefix = hotprefix;
document.getElementById('status').textContent = 'ready';
