// A script the Content-Security-Policy allows (script-src 'self').
document.getElementById("user").dataset.ready = "yes";
console.log("ready");
