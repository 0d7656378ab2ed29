import { defineConfig } from 'vite';

// Served by changeflowd under /console/ (http/handlers/static_files.cpp). Asset names carry a
// content hash so they can be cached forever; index.html is served no-store.
export default defineConfig({
  base: '/console/',
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    assetsDir: 'assets',
    target: 'es2020',
    sourcemap: false,
  },
});
