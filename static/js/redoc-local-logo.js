// Redoc's sidebar shows its maker's logo from a CDN: the one request its page would send to
// another host, which the Content-Security-Policy blocks (and the console reports). Loaded before
// Redoc, this points that image at this server's icon instead (templates/srbench/redoc.html),
// whether Redoc sets the image's attribute or its property.
(() => {
  const remote = "https://cdn.redoc.ly/redoc/logo-mini.svg";
  const local = document.currentScript.dataset.logo;
  const mapped = (value) => (String(value) === remote ? local : value);
  const setAttribute = Element.prototype.setAttribute;
  Element.prototype.setAttribute = function (name, value) {
    return setAttribute.call(this, name, name === "src" ? mapped(value) : value);
  };
  const src = Object.getOwnPropertyDescriptor(HTMLImageElement.prototype, "src");
  Object.defineProperty(HTMLImageElement.prototype, "src", {
    ...src,
    set(value) { src.set.call(this, mapped(value)); },
  });
})();
