// The site's search, working when the pages are opened as files (file://) as well as from a server.
// The theme's search starts a Worker and fetches search_index.json, which a page opened from the
// file system may not do (its origin is 'null'); here the index and lunr.js load as plain <script>
// tags (search/search_index.js is written by docs/hooks.py) and the search runs in the page.
// docs/hooks.py installs this file as search/main.js, in place of the theme's.
(function () {
  "use strict";
  var index = null, documents = {}, minLength = 3, loading = false;

  function url(path) {
    return base_url.replace(/\/$/, "") + "/" + path;
  }

  function escapeHtml(value) {
    return value.replace(/&/g, "&amp;").replace(/"/g, "&quot;")
      .replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }

  function loadScript(path, then) {
    var script = document.createElement("script");
    script.src = url(path);
    script.onload = then;
    script.onerror = function () { console.error("search: could not load " + path); };
    document.head.appendChild(script);
  }

  // Loads lunr.js and the index on first use (opening the search box, or ?q= in the address).
  function load() {
    if (loading) { return; }
    loading = true;
    loadScript("search/lunr.js", function () {
      loadScript("search/search_index.js", function () {
        var data = window.mkdocs_search_index;
        if (data.config && data.config.separator) {
          lunr.tokenizer.separator = new RegExp(data.config.separator);
        }
        if (data.config && data.config.min_search_length) {
          minLength = data.config.min_search_length;
        }
        data.docs.forEach(function (doc) { documents[doc.location] = doc; });
        index = data.index ? lunr.Index.load(data.index) : lunr(function () {
          this.field("title");
          this.field("text");
          this.ref("location");
          data.docs.forEach(function (doc) { this.add(doc); }, this);
        });
        document.getElementById("mkdocs-search-results").setAttribute("data-ready", "");
        run();
      });
    });
  }

  // Up to 200 characters of the text around the first word of the query found in it.
  function summary(text, query) {
    var words = query.toLowerCase().split(/\s+/).filter(Boolean), lower = text.toLowerCase();
    var at = -1;
    for (var i = 0; i < words.length && at < 0; i++) { at = lower.indexOf(words[i]); }
    var start = Math.max(0, at - 60);
    return (start > 0 ? "…" : "") + text.substring(start, start + 200) +
      (start + 200 < text.length ? "…" : "");
  }

  function find(query) {
    try {
      var found = index.search(query);
      return found.length ? found : index.search(query.replace(/\s*$/, "*"));
    } catch (parseError) {  // lunr's query syntax (field:, ~, ^): the words alone instead
      return index.search(query.replace(/[:~^*+\-]/g, " "));
    }
  }

  function show(query, results) {
    var box = document.getElementById("mkdocs-search-results");
    box.innerHTML = "";
    if (query.length < minLength) { return; }
    if (!results.length) {
      box.insertAdjacentHTML("beforeend", "<p>" +
        escapeHtml(box.getAttribute("data-no-results-text") || "No results found") + "</p>");
      return;
    }
    results.slice(0, 50).forEach(function (result) {
      var doc = documents[result.ref];
      box.insertAdjacentHTML("beforeend", '<article><h3><a href="' + escapeHtml(url(doc.location)) +
        '">' + escapeHtml(doc.title) + "</a></h3><p>" + escapeHtml(summary(doc.text, query)) +
        "</p></article>");
    });
  }

  function run() {
    var input = document.getElementById("mkdocs-search-query");
    if (!input || !index) { return; }
    var query = input.value.trim();
    show(query, query.length >= minLength ? find(query) : []);
  }

  function init() {
    var input = document.getElementById("mkdocs-search-query");
    var modal = document.getElementById("mkdocs_search_modal");
    if (!input) { return; }
    input.addEventListener("input", run);
    input.addEventListener("focus", load);
    if (input.form) {  // Enter searches instead of reloading the page
      input.form.addEventListener("submit", function (event) { event.preventDefault(); run(); });
    }
    if (modal) { modal.addEventListener("show.bs.modal", load); }
    var term = new URLSearchParams(window.location.search).get("q");
    if (term) {
      input.value = term;
      load();
    }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
